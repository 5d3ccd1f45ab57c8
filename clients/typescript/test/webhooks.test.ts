import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { DELIVERY_HEADER, SIGNATURE_HEADER, TetherError, verifySignature } from "../src/index.js";
import { liveClient } from "./helpers.js";

test("verifySignature checks what Tether's Go signer signed, and nothing else", () => {
  // webhook.Sign("whsec_test", time.Unix(1800000000, 0), body), by the server's own code.
  const body = '{"id":"whd_x","events":[]}';
  const header = "t=1800000000,v1=1ddf74de49ae4014713298d81fc685db63210ce09830b61189acb7fc08e52f30";
  const now = 1_800_000_000;
  assert.equal(verifySignature(body, header, "whsec_test", { now }), true);
  assert.equal(verifySignature(new TextEncoder().encode(body), header, "whsec_test", { now: now + 60 }), true);
  assert.equal(verifySignature(body, `v1=00, ${header}`, "whsec_test", { now }), true);
  assert.equal(verifySignature(body + " ", header, "whsec_test", { now }), false, "tampered body");
  assert.equal(verifySignature(body, header, "whsec_other", { now }), false, "other secret");
  assert.equal(verifySignature(body, header, "whsec_test", { now: now + 3600 }), false, "stale");
  assert.equal(verifySignature(body, header, "whsec_test", { now: now + 3600, toleranceSeconds: 0 }), true);
  for (const bad of ["", null, undefined, "nonsense", "t=x,v1=00", header.split(",")[0], header.split(",")[1]]) {
    assert.equal(verifySignature(body, bad, "whsec_test", { now }), false, String(bad));
  }
});

interface Received { delivery: string; signature: string; body: string }

test("webhooks: create, deliveries signed with the secret, history, replay, delete", async (t) => {
  const client = liveClient();
  const got: Received[] = [];
  const server = createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      got.push({ delivery: String(req.headers[DELIVERY_HEADER.toLowerCase()] ?? ""), signature: String(req.headers[SIGNATURE_HEADER.toLowerCase()] ?? ""), body: Buffer.concat(chunks).toString("utf8") });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const port = (server.address() as AddressInfo).port;

  await assert.rejects(client.createWebhook({ url: "http://127.0.0.1:1/", events: { states: ["nope"] } }),
    (err: unknown) => err instanceof TetherError && err.code === "INVALID_REQUEST" && err.status === 400);
  const created = await client.createWebhook({ url: `http://127.0.0.1:${port}/hook`, description: "ts test", events: { states: ["ready"] } });
  t.after(async () => { await client.deleteWebhook(created.webhook.id).catch(() => undefined); });
  assert.match(created.secret, /^whsec_/);
  assert.equal(created.webhook.state, "active");
  assert.deepEqual(created.webhook.events.states, ["ready"]);
  const listed = await client.listWebhooks();
  assert.ok(listed.items.some((w) => w.id === created.webhook.id));
  assert.ok(!JSON.stringify(listed).includes(created.secret), "the list shows no secret");

  const sb = await client.createSandbox({ provider: "sim", labels: { suite: "ts-webhooks" } });
  t.after(async () => { await client.deleteSandbox(sb.id); });
  const deadline = Date.now() + 30_000;
  const mine = () => got.filter((r) => r.body.includes(sb.id));
  while (mine().length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  const first = mine()[0];
  assert.ok(first, "the ready event was delivered");
  assert.equal(verifySignature(first.body, first.signature, created.secret), true, "signed with the create's secret");
  assert.equal(verifySignature(first.body.replace("ready", "failed"), first.signature, created.secret), false, "a tampered body fails");
  const payload = JSON.parse(first.body) as { id: string; events: { id: number; sandbox_id: string; to: string }[] };
  assert.equal(payload.id, first.delivery);
  const ev = payload.events.find((e) => e.sandbox_id === sb.id);
  assert.equal(ev?.to, "ready");

  const deliveries = await client.listWebhookDeliveries(created.webhook.id, { limit: 50 });
  const d = deliveries.items.find((x) => x.id === first.delivery);
  assert.equal(d?.status, "delivered");
  assert.equal(d?.response_status, 204);

  const replayed = await client.replayWebhook(created.webhook.id, { from_event_id: ev!.id });
  assert.equal(replayed.state, "active");
  const again = Date.now() + 30_000;
  while (mine().length < 2 && Date.now() < again) await new Promise((r) => setTimeout(r, 100));
  assert.ok(mine().length >= 2, "the replay delivered the event again");
  assert.notEqual(mine()[1]!.delivery, first.delivery, "a replay is a new delivery");

  const deleted = await client.deleteWebhook(created.webhook.id);
  assert.equal(deleted.id, created.webhook.id);
  await assert.rejects(client.getWebhook(created.webhook.id), (err: unknown) => err instanceof TetherError && err.code === "NOT_FOUND");
});

import { test } from "node:test";
import assert from "node:assert/strict";
import { OwnerLease, TetherError, type ExecStreamEvent } from "../src/index.js";
import { liveClient, text } from "./helpers.js";
import { TetherClient } from "../src/index.js";
import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const client = liveClient();

test("providers and health", async () => {
  assert.equal((await client.healthz()).status, "ok");
  assert.equal((await client.readyz()).status, "ok");
  const providers = await client.listProviders();
  const local = providers.items.find((p) => p.name === "local");
  assert.ok(local, "the local provider is listed");
  assert.equal(local.available, true, `local provider unavailable: ${local.reason}`);
});

test("errors are TetherError with code, status and state", async () => {
  await assert.rejects(client.getSandbox("sbx_doesnotexist"), (err: unknown) => {
    assert.ok(err instanceof TetherError);
    assert.equal(err.code, "NOT_FOUND");
    assert.equal(err.status, 404);
    assert.equal(err.state, undefined);
    return true;
  });
  await assert.rejects(client.createSandbox({ provider: "nope" }), (err: unknown) => err instanceof TetherError && err.code === "UNKNOWN_PROVIDER" && err.status === 400);
  const bad = new (client.constructor as typeof import("../src/index.js").TetherClient)({ baseUrl: client.baseUrl, apiKey: "wrong" });
  await assert.rejects(bad.listProviders(), (err: unknown) => err instanceof TetherError && err.code === "UNAUTHENTICATED" && err.status === 401);
});

test("every sandbox route on a real local sandbox", async (t) => {
  const lease = new OwnerLease(client, { ttlSeconds: 10 });
  const created = await client.createSandbox({ provider: "local", owner: lease.owner, labels: { suite: "ts-client" } }, { idempotencyKey: `ts-${lease.owner}` });
  t.after(async () => {
    await client.deleteSandbox(created.id);
    lease.release();
  });
  assert.equal(created.state, "requested");
  const again = await client.createSandbox({ provider: "local", owner: lease.owner, labels: { suite: "ts-client" } }, { idempotencyKey: `ts-${lease.owner}` });
  assert.equal(again.id, created.id, "the idempotency key returns the same sandbox");
  await lease.acquire();
  assert.equal(lease.beating, true);

  const sb = await client.waitSandbox(created.id, { timeoutMs: 60_000 });
  assert.equal(sb.state, "ready");
  assert.equal(sb.work_dir, "/workspace");

  const listed = await client.listSandboxes({ owner: lease.owner, released: false });
  assert.deepEqual(listed.items.map((s) => s.id), [created.id]);

  const res = await client.exec(sb.id, { command: "printf hi; printf oops >&2; exit 3", timeout_seconds: 10 });
  assert.equal(res.exit_code, 3);
  assert.equal(res.output, "hioops");
  assert.equal(res.timeout_seconds, 10);

  const events: ExecStreamEvent[] = [];
  for await (const ev of client.execStream(sb.id, { command: "echo out; echo err >&2; exit 2" })) events.push(ev);
  const outs = events.filter((e) => e.type === "stdout").map((e) => (e.type === "stdout" ? e.data : "")).join("");
  const errs = events.filter((e) => e.type === "stderr").map((e) => (e.type === "stderr" ? e.data : "")).join("");
  assert.equal(outs, "out\n");
  assert.equal(errs, "err\n");
  const last = events.at(-1);
  assert.ok(last && last.type === "exit");
  assert.equal(last.result.exit_code, 2);
  assert.equal(last.result.timeout_seconds, 60, "absent timeout_seconds is the server's 60 s default");

  await client.writeFile(sb.id, "/workspace/dir/a.txt", "alpha\n");
  assert.equal(text(await client.readFile(sb.id, "/workspace/dir/a.txt")), "alpha\n");
  const tar = await client.getArchive(sb.id, "/workspace/dir");
  assert.ok(tar.length >= 512);
  await client.putArchive(sb.id, "/workspace/copy", tar);
  assert.equal(text(await client.readFile(sb.id, "/workspace/copy/a.txt")), "alpha\n");

  const renewed = await client.renewSandbox(sb.id, 600);
  assert.ok(Date.parse(renewed.expires_at) > Date.now() + 500_000);

  const ownerLease = await client.putOwnerLease(lease.owner, 10);
  assert.equal(ownerLease.owner, lease.owner);

  const other = `${lease.owner}-other`;
  const moved = await client.transferOwner(sb.id, other);
  assert.equal(moved.owner, other);
  await client.transferOwner(sb.id, lease.owner);

  const evs = await client.listSandboxEvents(sb.id);
  assert.ok(evs.items.some((e) => e.to === "ready"));
  assert.ok(evs.items.some((e) => e.reason === "owner_transferred"));
  const all = await client.listEvents({ limit: 500 });
  assert.ok(all.items.some((e) => e.sandbox_id === sb.id));

  const released = await client.releaseOwner(other);
  assert.equal(released.sandboxes_ended, 0);
});

test("releasing an owner ends its sandboxes", async () => {
  const owner = `ts-release-${process.pid}`;
  const sb = await client.createSandbox({ provider: "sim", owner });
  const rel = await client.releaseOwner(owner);
  assert.deepEqual(rel.sandbox_ids, [sb.id]);
  const gone = await client.waitSandbox(sb.id, { until: "released", timeoutMs: 30_000 });
  assert.equal(gone.reason, "owner_released");
});

test("AbortSignal aborts long-polls and exec streams", async (t) => {
  const sb = await client.createSandbox({ provider: "local" });
  t.after(() => client.deleteSandbox(sb.id));
  await client.waitSandbox(sb.id, { timeoutMs: 60_000 });

  // A long-poll on a sandbox that stays ready returns at once, so poll released.
  const ac = new AbortController();
  const started = Date.now();
  setTimeout(() => ac.abort(), 300);
  await assert.rejects(client.waitSandbox(sb.id, { until: "released", signal: ac.signal }), (err: unknown) => err instanceof Error && err.name === "AbortError");
  assert.ok(Date.now() - started < 5_000, "the long-poll was cut short");

  const ac2 = new AbortController();
  const seen: string[] = [];
  const run = (async () => {
    for await (const ev of client.execStream(sb.id, { command: "echo started; sleep 30; echo never" }, { signal: ac2.signal })) {
      if (ev.type === "stdout") {
        seen.push(ev.data);
        ac2.abort();
      }
    }
  })();
  const t0 = Date.now();
  await assert.rejects(run, (err: unknown) => err instanceof Error && err.name === "AbortError");
  assert.ok(Date.now() - t0 < 10_000);
  assert.deepEqual(seen, ["started\n"]);

  const ac3 = new AbortController();
  ac3.abort();
  await assert.rejects(client.exec(sb.id, { command: "true" }, { signal: ac3.signal }), (err: unknown) => err instanceof Error && err.name === "AbortError");
});

test("a conflict carries the sandbox's state, before and in an exec stream", async () => {
  const sb = await client.createSandbox({ provider: "local" });
  await client.deleteSandbox(sb.id);
  await assert.rejects(client.exec(sb.id, { command: "true" }), (err: unknown) => {
    assert.ok(err instanceof TetherError);
    assert.equal(err.code, "SANDBOX_STATE_CONFLICT");
    assert.equal(err.status, 409);
    assert.equal(err.state, "cancelled");
    return true;
  });
  await assert.rejects(async () => {
    for await (const _ of client.execStream(sb.id, { command: "true" })) { /* nothing */ }
  }, (err: unknown) => err instanceof TetherError && err.code === "SANDBOX_STATE_CONFLICT");
});

test("an exec stream parses chunked SSE and throws an error event's Problem as TetherError", async () => {
  const wire = [
    ": comment\r\n",
    "event: stdout\r\ndata: {\"data\":\"a\\nb\"}\r\n\r\nevent: std",
    "err\ndata: {\"data\":\"e\"}\n\n",
    "event: error\ndata: {\"type\":\"https://x/errors#internal\",\"title\":\"Internal\",\"status\":500,\"code\":\"INTERNAL\",\"detail\":\"boom\",\"request_id\":\"r1\"}\n\n",
  ];
  const fake: typeof fetch = async (input, init) => {
    const req = new Request(input, init);
    assert.equal(req.headers.get("Accept"), "text/event-stream");
    assert.equal(req.headers.get("Authorization"), "Bearer k");
    assert.deepEqual(await req.json(), { command: "x" });
    const body = new ReadableStream<Uint8Array>({
      start(c) {
        for (const w of wire) c.enqueue(new TextEncoder().encode(w));
        c.close();
      },
    });
    return new Response(body, { status: 200, headers: { "Content-Type": "text/event-stream" } });
  };
  const c = new TetherClient({ baseUrl: "http://tether.invalid", apiKey: "k", fetch: fake });
  const got: string[] = [];
  await assert.rejects(async () => {
    for await (const ev of c.execStream("sbx_1", { command: "x" })) got.push(ev.type === "exit" ? "exit" : `${ev.type}:${ev.data}`);
  }, (err: unknown) => err instanceof TetherError && err.code === "INTERNAL" && err.status === 500 && err.requestId === "r1" && err.message.includes("boom"));
  assert.deepEqual(got, ["stdout:a\nb", "stderr:e"]);
});

test("a request that gets no answer is a TetherError UNAVAILABLE with status 0", async () => {
  const c = new TetherClient({ baseUrl: "http://127.0.0.1:9", apiKey: "k" });
  await assert.rejects(c.listProviders(), (err: unknown) => err instanceof TetherError && err.code === "UNAVAILABLE" && err.status === 0);
});

test("the public API's declarations have no any", () => {
  const dir = fileURLToPath(new URL("../src/", import.meta.url)); // build/src, emitted with declarations
  const files = readdirSync(dir).filter((f) => f.endsWith(".d.ts"));
  assert.ok(files.includes("index.d.ts") && files.includes("deepagents.d.ts"), files.join(","));
  for (const f of files) {
    const code = readFileSync(dir + f, "utf8").replace(/\/\*[\s\S]*?\*\//g, "").replace(/\/\/.*$/gm, "");
    assert.doesNotMatch(code, /\bany\b/, `${f} declares an any`);
  }
});

test("pause and resume a local sandbox: its processes stop and go on", async (t) => {
  const created = await client.createSandbox({ provider: "local", labels: { suite: "ts-client" } });
  t.after(async () => { await client.deleteSandbox(created.id); });
  const sb = await client.waitSandbox(created.id, { timeoutMs: 60_000 });
  assert.equal(sb.state, "ready");
  await client.exec(sb.id, { command: "(echo $$ > /workspace/pid; i=0; while :; do i=$((i+1)); echo $i > /workspace/n.tmp; mv /workspace/n.tmp /workspace/n; sleep 0.05; done) </dev/null >/dev/null 2>&1 &" });
  const count = async (): Promise<[string, number]> => {
    const out = (await client.exec(sb.id, { command: "cat /workspace/pid; cat /workspace/n 2>/dev/null || echo 0" })).output.split(/\s+/);
    return [out[0] ?? "", Number(out[1])];
  };
  const until = async (min: number): Promise<void> => {
    const deadline = Date.now() + 20_000;
    while ((await count())[1] <= min) {
      if (Date.now() > deadline) throw new Error(`the counter never passed ${min}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  await until(2);
  const [pid] = await count();

  const paused = await client.pauseSandbox(sb.id, { wait: "30s" });
  assert.equal(paused.state, "paused");
  assert.equal((await client.pauseSandbox(sb.id)).state, "paused", "pause is idempotent");
  await assert.rejects(client.exec(sb.id, { command: "true" }), (err: unknown) =>
    err instanceof TetherError && err.code === "SANDBOX_STATE_CONFLICT" && err.status === 409 && err.state === "paused");

  const resumed = await client.resumeSandbox(sb.id, { wait: "30s" });
  assert.equal(resumed.state, "ready");
  assert.equal((await client.resumeSandbox(sb.id)).state, "ready", "resume is idempotent");
  const [again, before] = await count();
  assert.equal(again, pid, "the same counter runs after the resume");
  await until(before + 2);
  await assert.rejects(client.resumeSandbox("sbx_00000000000000000000000000"), (err: unknown) => err instanceof TetherError && err.code === "NOT_FOUND");
});

test("ports and preview URLs of a real local sandbox", async (t) => {
  const created = await client.createSandbox({ provider: "local", labels: { suite: "ts-client" } });
  t.after(async () => {
    await client.deleteSandbox(created.id);
  });
  const sb = await client.waitSandbox(created.id, { timeoutMs: 60_000 });
  const started = await client.exec(sb.id, {
    command: "mkdir -p /workspace/www && printf hi > /workspace/www/index.html && cd /workspace/www && (python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &)",
  });
  assert.equal(started.exit_code, 0);
  assert.equal(client.portUrl(sb.id, 8000, "/index.html"), `${client.baseUrl}/v1/sandboxes/${sb.id}/ports/8000/index.html`);
  assert.throws(() => client.portUrl(sb.id, 0), RangeError);
  let res = await client.fetchPort(sb.id, 8000, "index.html");
  for (const deadline = Date.now() + 30_000; res.status !== 200 && Date.now() < deadline; ) {
    await new Promise((r) => setTimeout(r, 100));
    res = await client.fetchPort(sb.id, 8000, "index.html");
  }
  assert.equal(res.status, 200);
  assert.equal(await res.text(), "hi");
  const refused = await client.fetchPort(sb.id, 8001);
  assert.equal(refused.status, 502);
  assert.equal(((await refused.json()) as { code: string }).code, "PORT_UNREACHABLE");

  const preview = await client.createPreview(sb.id, { port: 8000, ttl_seconds: 600 });
  assert.ok(preview.url && preview.token);
  const open = await fetch(`${preview.url}index.html`); // no API key
  assert.equal(await open.text(), "hi");
  const list = await client.listPreviews(sb.id);
  assert.deepEqual(list.items.map((p) => [p.id, p.token]), [[preview.id, null]]);
  const revoked = await client.revokePreview(sb.id, preview.id);
  assert.ok(revoked.revoked_at);
  const gone = await fetch(preview.url);
  assert.equal(gone.status, 410);
  await assert.rejects(client.createPreview(sb.id, { port: 0 }), (err: unknown) => err instanceof TetherError && err.code === "INVALID_REQUEST");
});

test("snapshots: take, list, restore, delete; exit snapshots", async (t) => {
  const src = await client.createSandbox({ provider: "local", labels: { suite: "ts-client" }, params: { workspace_mb: 32 } });
  const made: string[] = [src.id];
  t.after(async () => {
    for (const id of made) await client.deleteSandbox(id);
  });
  await client.waitSandbox(src.id, { timeoutMs: 60_000 });
  await client.writeFile(src.id, "/workspace/keep.txt", "kept");
  const snap = await client.createSnapshot(src.id, { wait: "30s" });
  assert.equal(snap.state, "ready");
  assert.equal(snap.kind, "manual");
  assert.equal(snap.source_sandbox_id, src.id);
  assert.deepEqual((await client.listSnapshots({ sandbox: src.id })).items.map((s) => s.id), [snap.id]);
  assert.equal((await client.getSnapshot(snap.id)).state, "ready");

  const restored = await client.createSandbox({ provider: "local", labels: { suite: "ts-client" }, from_snapshot: snap.id, on_end: "snapshot" });
  made.push(restored.id);
  assert.equal(restored.from_snapshot, snap.id);
  await client.waitSandbox(restored.id, { timeoutMs: 60_000 });
  assert.equal(text(await client.readFile(restored.id, "/workspace/keep.txt")), "kept");

  // Deleting the restored sandbox (on_end snapshot) takes an exit snapshot.
  await client.deleteSandbox(restored.id);
  await client.waitSandbox(restored.id, { until: "released", timeoutMs: 60_000 });
  const exits = (await client.listSnapshots({ sandbox: restored.id })).items;
  assert.deepEqual(exits.map((s) => [s.kind, s.state]), [["exit", "ready"]]);

  assert.equal((await client.deleteSnapshot(snap.id)).state, "deleted");
  await assert.rejects(client.createSandbox({ provider: "local", from_snapshot: snap.id }),
    (err: unknown) => err instanceof TetherError && err.code === "SNAPSHOT_NOT_READY" && err.status === 409);
  await assert.rejects(client.getSnapshot("snp_" + "0".repeat(26)),
    (err: unknown) => err instanceof TetherError && err.code === "NOT_FOUND" && err.status === 404);
  for (const s of exits) await client.deleteSnapshot(s.id);
});

import { test } from "node:test";
import assert from "node:assert/strict";
import { TetherError } from "../src/index.js";
import { liveClient } from "./helpers.js";

// Network rules, named policies and secrets against a live Tether (its
// SECRETS_KEY set), on a real local allow-list sandbox.

test("secrets by name only, a named policy, and a sandbox's rules edited", async (t) => {
  const client = liveClient();
  const name = `ts-${Math.random().toString(16).slice(2, 10)}`;
  const secret = await client.putSecret(name, "s3cret-typescript-value");
  assert.equal(secret.name, name);
  assert.ok(!JSON.stringify(secret).includes("s3cret-typescript-value"));
  assert.ok((await client.listSecrets()).items.some((s) => s.name === name));
  await assert.rejects(client.putSecret(name, "two\nlines"), (err: unknown) => err instanceof TetherError && err.code === "INVALID_REQUEST");

  const policy = await client.putNetworkPolicy(name, { allow: ["pypi.org", "*.pythonhosted.org"] });
  assert.deepEqual(policy.allow, ["pypi.org", "*.pythonhosted.org"]);
  t.after(() => client.deleteNetworkPolicy(name).catch(() => undefined));

  const created = await client.createSandbox({
    provider: "local", labels: { suite: "ts-network" },
    params: {
      network: "allowlist", allow: ["example.com"], policies: [name],
      credentials: [{ host: "api.example.com", header: "Authorization", format: "Bearer {secret}", secret: name }],
    },
  });
  t.after(() => client.deleteSandbox(created.id));
  const sb = await client.waitSandbox(created.id, { timeoutMs: 60_000 });
  assert.equal(sb.state, "ready");

  const net = await client.getNetwork(sb.id);
  assert.equal(net.network, "allowlist");
  assert.deepEqual(net.allow, ["example.com"]);
  assert.deepEqual(net.policies, [name]);
  assert.deepEqual(net.credentials.map((c) => c.secret), [name]);

  const edited = await client.updateNetwork(sb.id, { allow: ["example.com", "github.com:443"], policies: [] });
  assert.equal(edited.edited, true);
  assert.deepEqual(edited.allow, ["example.com", "github.com:443"]);
  assert.deepEqual(edited.credentials.map((c) => c.host), ["api.example.com"]);
  await assert.rejects(client.updateNetwork(sb.id, { allow: ["not a host!"] }), (err: unknown) => err instanceof TetherError && err.code === "INVALID_REQUEST");
  assert.deepEqual((await client.getNetwork(sb.id)).allow, ["example.com", "github.com:443"]);

  await client.deleteNetworkPolicy(name);
  await assert.rejects(client.getNetworkPolicy(name), (err: unknown) => err instanceof TetherError && err.code === "NOT_FOUND");
  await client.deleteSecret(name);
  assert.ok(!(await client.listSecrets()).items.some((s) => s.name === name));
});

// The lifecycle and initialFiles cases of deepagents' sandbox standard
// tests (@langchain/sandbox-standard-tests: lifecycle.ts, initial-files.ts)
// as Tether has them, beyond what the standard cases check (standard.ts):
// the id chosen at construction, nothing requested before initialize(),
// bytes, a failed initial file, close() during initialize().
import { test } from "node:test";
import assert from "node:assert/strict";
import { SandboxError } from "deepagents";
import { TetherSandbox } from "../src/deepagents.js";
import { bytes, liveClient, text } from "./helpers.js";

const client = liveClient();
const labels = { suite: "ts-lifecycle" };
const make = (more: Partial<ConstructorParameters<typeof TetherSandbox>[0]> = {}) =>
  TetherSandbox.create({ client, provider: "local", labels, ...more });

test("create: a valid id, isRunning true; close: isRunning false", async () => {
  const sb = await make();
  assert.match(sb.id, /^sbx_[0-9a-hjkmnp-tv-z]{26}$/);
  assert.equal(sb.isRunning, true);
  await sb.close();
  assert.equal(sb.isRunning, false);
  assert.equal(sb.closed, true);
  assert.equal((await client.getSandbox(sb.id)).state, "terminated");
});

test("two-step initialization: not running, then initialize() makes it so", async () => {
  const sb = new TetherSandbox({ client, provider: "local", labels });
  const id = sb.id;
  assert.equal(sb.isRunning, false);
  assert.equal(sb.sandbox === null, true);
  await assert.rejects(sb.execute("true"), (err: unknown) => SandboxError.isInstance(err) && err.code === "NOT_INITIALIZED");
  const listed = await client.listSandboxes({ label: [`suite=ts-lifecycle`], state: ["requested", "creating", "ready"] });
  assert.ok(!listed.items.some((s) => s.id === id), "nothing is requested before initialize()");
  await sb.initialize();
  assert.equal(sb.isRunning, true);
  assert.equal(sb.id, id, "the id chosen at construction is the sandbox's");
  assert.equal(sb.sandbox?.state, "ready");
  assert.equal((await sb.execute("echo two-step")).output, "two-step\n");
  await assert.rejects(sb.initialize(), (err: unknown) => SandboxError.isInstance(err) && err.code === "ALREADY_INITIALIZED");
  await sb.close();
  assert.equal(sb.isRunning, false);
  const unused = new TetherSandbox({ client, provider: "local", labels });
  await unused.close(); // never initialized: nothing to delete
  assert.equal(unused.isRunning, false);
});

test("initialFiles: basic, deeply nested, bytes, and empty", async () => {
  const sb = await make({
    initialFiles: {
      "/workspace/init-test.txt": "Hello from initial file!",
      "/workspace/nested/dir/file.txt": "Nested content",
      "/workspace/src/components/Button/index.tsx": "export const Button = () => <button>Click</button>;",
      "/tmp/raw.bin": new Uint8Array([0, 1, 2, 255]),
    },
  });
  try {
    assert.equal(sb.isRunning, true);
    const r1 = await sb.execute("cat /workspace/init-test.txt");
    assert.equal(r1.exitCode, 0);
    assert.equal(r1.output.trim(), "Hello from initial file!");
    assert.equal((await sb.execute("cat /workspace/nested/dir/file.txt")).output.trim(), "Nested content");
    assert.match((await sb.read("/workspace/src/components/Button/index.tsx")).content?.toString() ?? "", /Button/);
    const [down] = await sb.downloadFiles(["/workspace/init-test.txt"]);
    assert.equal(text(down?.content ?? bytes("")), "Hello from initial file!");
    assert.deepEqual([...(await client.readFile(sb.id, "/tmp/raw.bin"))], [0, 1, 2, 255]);
  } finally {
    await sb.close();
  }
  const empty = await make({ initialFiles: {} });
  try {
    assert.equal(empty.isRunning, true);
    assert.match((await empty.execute('echo "Works!"')).output, /Works!/);
  } finally {
    await empty.close();
  }
});

test("an initial file that cannot be written fails the create and ends the sandbox", async () => {
  const sb = new TetherSandbox({ client, provider: "local", labels, initialFiles: { "/etc/not-writable.txt": "x" } });
  const id = sb.id;
  await assert.rejects(sb.initialize(), (err: unknown) => SandboxError.isInstance(err) && err.code === "FILE_OPERATION_FAILED" && err.message.includes("/etc/not-writable.txt") && err.message.includes(id));
  assert.equal(sb.isRunning, false);
  const ended = await client.waitSandbox(id, { until: "released", timeoutMs: 30_000 });
  assert.equal(ended.state, "terminated");
  assert.notEqual(sb.id, id, "a retried initialize() gets a new id");
});

test("close() while initialize() runs: it aborts the create, and the sandbox is gone when close() returns", async () => {
  const sb = new TetherSandbox({ client, provider: "local", labels, setup: "sleep 30" });
  const id = sb.id;
  const init = sb.initialize().then(
    () => null,
    (err: unknown) => err,
  );
  // Until the setup runs: the sandbox is creating.
  for (let i = 0; i < 200; i++) {
    const got = await client.getSandbox(id).catch(() => null);
    if (got?.state === "creating") break;
    await new Promise((r) => setTimeout(r, 50));
  }
  await sb.close();
  const ended = await client.getSandbox(id);
  assert.equal(ended.state, "cancelled", "close() returned before the sandbox was ended");
  const err = await init;
  assert.ok(SandboxError.isInstance(err) && err.code === "NOT_INITIALIZED", String(err));
  assert.equal(sb.isRunning, false);
  assert.equal((await client.waitSandbox(id, { until: "released", timeoutMs: 30_000 })).released, true);
});

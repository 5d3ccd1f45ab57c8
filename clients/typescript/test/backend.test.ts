import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { isSandboxBackend } from "deepagents";
import { TetherSandbox, TetherSandboxError } from "../src/deepagents.js";
import { processOwner } from "../src/index.js";
import { bytes, liveClient, pollUntil, text } from "./helpers.js";

const client = liveClient();
let sandbox: TetherSandbox;

before(async () => {
  sandbox = await TetherSandbox.create({ client, provider: "local", labels: { suite: "ts-backend" } });
});

after(async () => {
  await sandbox.close();
  assert.equal(processOwner(client).beating, false, "the heartbeat stops with the last sandbox");
});

test("create binds the sandbox to the process's owner, heartbeated", async () => {
  assert.equal(isSandboxBackend(sandbox), true);
  assert.match(sandbox.id, /^sbx_/);
  assert.equal(sandbox.sandbox?.state, "ready");
  const lease = processOwner(client);
  assert.equal(sandbox.lease, lease);
  assert.equal(sandbox.sandbox?.owner, lease.owner);
  assert.equal(lease.beating, true);
});

test("execute: output, exit code and deepagents' timeout semantics", async () => {
  const r = await sandbox.execute("echo hello; echo world >&2; exit 7");
  assert.deepEqual(r, { output: "hello\nworld\n", exitCode: 7, truncated: false });
  assert.equal((await sandbox.execute("pwd")).output, "/workspace\n");

  const timed = await sandbox.execute("sleep 5", { timeout: 1 });
  assert.equal(timed.exitCode, 124);
  assert.match(timed.output, /timed out after 1 seconds/);

  // The client's exec without a timeout: the server's 60 s (the backend's is 30 minutes, peers.test.ts);
  // 0: no limit of ours, the server's maximum.
  const echoed = await client.exec(sandbox.id, { command: "true" });
  assert.equal(echoed.timeout_seconds, 60);
  const unlimited = await sandbox.execute("sleep 1.2; echo done", { timeout: 0 });
  assert.deepEqual(unlimited, { output: "done\n", exitCode: 0, truncated: false });
  const max = await client.exec(sandbox.id, { command: "true", timeout_seconds: 0 });
  assert.ok(max.timeout_seconds >= 60, `0 means the server's maximum, got ${max.timeout_seconds}`);
  await assert.rejects(sandbox.execute("true", { timeout: -1 }), RangeError);
});

test("file tools BaseSandbox derives: write, read with offset/limit, ls, edit, grep, glob", async () => {
  const lines = Array.from({ length: 10 }, (_, i) => `line ${i + 1}`).join("\n") + "\n";
  assert.deepEqual(await sandbox.write("/workspace/proj/notes.txt", lines), { path: "/workspace/proj/notes.txt", filesUpdate: null });
  assert.equal((await sandbox.write("/workspace/proj/src/main.py", "print('hello')\nTODO = 1\n")).error, undefined);
  assert.equal((await sandbox.write("/workspace/proj/src/util.py", "def f():\n    return 'TODO'\n")).error, undefined);
  assert.equal(text(await client.readFile(sandbox.id, "/workspace/proj/notes.txt")), lines);

  const full = await sandbox.read("/workspace/proj/notes.txt");
  assert.equal(full.error, undefined);
  assert.equal(typeof full.content, "string");
  assert.match(String(full.content), /line 1\b/);
  assert.match(String(full.content), /line 10/);
  const slice = await sandbox.read("/workspace/proj/notes.txt", 2, 3);
  const sliced = String(slice.content);
  assert.match(sliced, /line 3/);
  assert.match(sliced, /line 5/);
  assert.doesNotMatch(sliced, /line 2\b/);
  assert.doesNotMatch(sliced, /line 6/);
  assert.match((await sandbox.read("/workspace/proj/missing.txt")).error ?? "", /not found/);

  const ls = await sandbox.ls("/workspace/proj");
  assert.equal(ls.error, undefined);
  const entries = (ls.files ?? []).map((f) => [f.path, f.is_dir]).sort();
  assert.deepEqual(entries, [["/workspace/proj/notes.txt", false], ["/workspace/proj/src/", true]]);
  const notes = ls.files?.find((f) => f.path.endsWith("notes.txt"));
  assert.equal(notes?.size, lines.length);

  const edit = await sandbox.edit("/workspace/proj/notes.txt", "line 3\n", "LINE THREE\n");
  assert.equal(edit.error, undefined);
  assert.equal(edit.occurrences, 1);
  const multi = await sandbox.edit("/workspace/proj/notes.txt", "line", "row");
  assert.match(multi.error ?? "", /Multiple occurrences/);
  const all = await sandbox.edit("/workspace/proj/notes.txt", "line", "row", true);
  assert.equal(all.error, undefined);
  assert.equal(all.occurrences, 9);
  const after = text(await client.readFile(sandbox.id, "/workspace/proj/notes.txt"));
  assert.equal(after, lines.replace("line 3\n", "LINE THREE\n").replaceAll("line", "row"));
  assert.match((await sandbox.edit("/workspace/proj/nope.txt", "a", "b")).error ?? "", /not found/);

  const grep = await sandbox.grep("TODO", "/workspace/proj");
  assert.equal(grep.error, undefined);
  const hits = (grep.matches ?? []).map((m) => [m.path, m.line, m.text]).sort();
  assert.deepEqual(hits, [
    ["/workspace/proj/src/main.py", 2, "TODO = 1"],
    ["/workspace/proj/src/util.py", 2, "    return 'TODO'"],
  ]);
  const grepGlob = await sandbox.grep("TODO", "/workspace/proj", "util.*");
  assert.deepEqual((grepGlob.matches ?? []).map((m) => m.path), ["/workspace/proj/src/util.py"]);

  const glob = await sandbox.glob("**/*.py", "/workspace/proj");
  assert.deepEqual((glob.files ?? []).map((f) => f.path).sort(), ["src/main.py", "src/util.py"]);
  const top = await sandbox.glob("*.txt", "/workspace/proj");
  assert.deepEqual((top.files ?? []).map((f) => f.path), ["notes.txt"]);
});

test("file errors map to deepagents' literals from real cases", async () => {
  const setup = await sandbox.execute("mkdir -p /workspace/locked /workspace/adir && chmod 555 /workspace/locked && printf x > /workspace/secret && chmod 000 /workspace/secret && id -u");
  assert.equal(setup.exitCode, 0, setup.output);

  const down = await sandbox.downloadFiles(["/workspace/no-such-file", "/workspace/adir", "/workspace/proj/notes.txt"]);
  assert.deepEqual(down.map((d) => d.error), ["file_not_found", "is_directory", null]);
  assert.equal(down[0]?.content, null);
  assert.ok(down[2]?.content && down[2].content.length > 0);

  const up = await sandbox.uploadFiles([
    ["/workspace/locked/x.txt", bytes("x")],
    ["/etc/tether-nope", bytes("x")],
    ["/workspace/adir", bytes("x")],
    ["/tmp/ok.txt", bytes("ok")],
  ]);
  assert.deepEqual(up.map((u) => u.error), ["permission_denied", "invalid_path", "is_directory", null]);
  assert.equal(text(await client.readFile(sandbox.id, "/tmp/ok.txt")), "ok");

  // deepagents' write reports the literal too.
  assert.match((await sandbox.write("/workspace/locked/y.txt", "y")).error ?? "", /permission_denied/);
});

test("connect reattaches, adopting the sandbox by owner transfer", async () => {
  const other = await client.createSandbox({ provider: "local", owner: `ts-other-${process.pid}` });
  try {
    await client.waitSandbox(other.id, { timeoutMs: 60_000 });
    const attached = await TetherSandbox.connect(other.id, { client });
    assert.equal(attached.id, other.id);
    assert.equal(attached.sandbox?.owner, processOwner(client).owner);
    assert.equal((await client.getSandbox(other.id)).owner, processOwner(client).owner);
    assert.equal((await attached.execute("echo again")).output, "again\n");
    await attached.close();
    assert.ok(["terminated", "cancelled"].includes(attached.sandbox?.state ?? ""));
    assert.equal(attached.isRunning, false);
  } finally {
    await client.deleteSandbox(other.id);
  }
  await assert.rejects(TetherSandbox.connect("sbx_nope", { client }), (err: unknown) => err instanceof TetherSandboxError && err.code === "SANDBOX_NOT_FOUND" && err.tether?.code === "NOT_FOUND");
});

test("an aborted create leaves a cancelled, released sandbox", async () => {
  const ac = new AbortController();
  const label = `abort-${process.pid}-${Date.now()}`;
  // The setup keeps the sandbox creating long enough to abort mid-create.
  const pending = TetherSandbox.create({ client, provider: "local", labels: { abort: label }, setup: "sleep 20", signal: ac.signal });
  setTimeout(() => ac.abort(), 700);
  await assert.rejects(pending, (err: unknown) => err instanceof Error && err.name === "AbortError");
  const list = await client.listSandboxes({ label: [`abort=${label}`] });
  assert.equal(list.items.length, 1);
  const id = list.items[0]?.id ?? "";
  const sb = await pollUntil(() => client.getSandbox(id, { wait: "10s", until: "released" }), (s) => s.released);
  assert.equal(sb.state, "cancelled");
  assert.equal(sb.reason, "requested");
});

test("a create aborted before its answer arrived still deletes what it requested", async () => {
  const ac = new AbortController();
  const label = `lost-${process.pid}-${Date.now()}`;
  // A fetch whose create reaches Tether but whose answer is lost to the abort.
  const lossy: typeof fetch = async (input, init) => {
    const req = new Request(input, init);
    const res = await fetch(req.clone(), { signal: null });
    if (req.method === "POST" && new URL(req.url).pathname === "/v1/sandboxes" && !ac.signal.aborted) {
      ac.abort();
      throw ac.signal.reason;
    }
    return res;
  };
  const lossyClient = new (client.constructor as typeof import("../src/index.js").TetherClient)({ baseUrl: client.baseUrl, apiKey: process.env["TETHER_API_KEY"], fetch: lossy });
  await assert.rejects(
    TetherSandbox.create({ client: lossyClient, provider: "local", labels: { lost: label }, signal: ac.signal }),
    (err: unknown) => err instanceof Error && err.name === "AbortError",
  );
  const list = await client.listSandboxes({ label: [`lost=${label}`] });
  assert.equal(list.items.length, 1, "one sandbox was requested, once");
  const id = list.items[0]?.id ?? "";
  const sb = await pollUntil(() => client.getSandbox(id, { wait: "10s", until: "released" }), (s) => s.released);
  assert.ok(["cancelled", "terminated"].includes(sb.state), sb.state);
  assert.equal(sb.reason, "requested");
});

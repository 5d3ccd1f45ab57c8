// What TetherSandbox shares with deepagents' other sandboxes: the default
// command timeout, paths relative to the working directory, the errors
// (deepagents' SandboxError and its codes), and one owner per process.
import { test } from "node:test";
import assert from "node:assert/strict";
import { SandboxError } from "deepagents";
import { DEFAULT_EXEC_TIMEOUT, TetherSandbox, TetherSandboxError, resolveSandboxPath } from "../src/deepagents.js";
import { TetherClient, processOwner } from "../src/index.js";
import { bytes, liveClient, text } from "./helpers.js";

const client = liveClient();
const labels = { suite: "ts-peers" };

/** A client whose requests are counted (and their bodies kept), and that can be cut off from Tether. */
function spiedClient(): { client: TetherClient; requests: Array<{ method: string; path: string; body: string }>; cut: () => void } {
  const requests: Array<{ method: string; path: string; body: string }> = [];
  let cut = false;
  const spy: typeof fetch = async (input, init) => {
    const req = new Request(input, init);
    requests.push({ method: req.method, path: new URL(req.url).pathname, body: await req.clone().text() });
    if (cut) throw new TypeError("fetch failed: connection refused");
    return fetch(req);
  };
  return {
    client: new TetherClient({ baseUrl: client.baseUrl, apiKey: process.env["TETHER_API_KEY"], fetch: spy }),
    requests,
    cut: () => { cut = true; },
  };
}

const isCode = (code: string) => (err: unknown): boolean => {
  assert.ok(SandboxError.isInstance(err), `not a SandboxError: ${String(err)}`);
  assert.ok(err instanceof SandboxError, "instanceof SandboxError");
  assert.ok(err instanceof TetherSandboxError, "instanceof TetherSandboxError");
  assert.ok(TetherSandboxError.isInstance(err));
  assert.equal(err.name, "TetherSandboxError");
  assert.equal(err.code, code, err.message);
  return true;
};

test("execute without a timeout asks for 30 minutes; defaultTimeout and the call's timeout override it", async (t) => {
  assert.equal(DEFAULT_EXEC_TIMEOUT, 1800);
  const spied = spiedClient();
  const sb = await TetherSandbox.create({ client: spied.client, provider: "local", labels });
  t.after(() => sb.close());
  assert.equal(sb.defaultTimeout, 1800);
  const execBodies = () => spied.requests.filter((r) => r.path.endsWith("/exec")).map((r) => JSON.parse(r.body) as { timeout_seconds?: number });

  assert.equal((await sb.execute("echo untimed")).output, "untimed\n");
  assert.equal((await sb.execute("true", { timeout: 5 })).exitCode, 0);
  assert.equal((await sb.execute("true", { timeout: 0 })).exitCode, 0);
  assert.deepEqual(execBodies().map((b) => b.timeout_seconds), [1800, 5, 0]);

  const short = await TetherSandbox.connect(sb.id, { client: spied.client, defaultTimeout: 1 });
  assert.equal(short.defaultTimeout, 1);
  const timed = await short.execute("sleep 3; echo never");
  assert.equal(timed.exitCode, 124);
  assert.match(timed.output, /timed out after 1 seconds/);
  assert.deepEqual(execBodies().at(-1), { command: "sleep 3; echo never", timeout_seconds: 1 });
  assert.throws(() => new TetherSandbox({ client, defaultTimeout: -1 }), RangeError);

  process.env["TETHER_EXEC_TIMEOUT"] = "600";
  try {
    assert.equal(new TetherSandbox({ client }).defaultTimeout, 600);
  } finally {
    delete process.env["TETHER_EXEC_TIMEOUT"];
  }
});

test("resolveSandboxPath resolves relative paths as a shell in the working directory would", () => {
  const cases: Array<[string, string]> = [
    ["a/b", "/workspace/a/b"],
    ["./x", "/workspace/x"],
    ["x/./y//z", "/workspace/x/y/z"],
    ["../x", "/x"],
    ["../../../../etc/passwd", "/etc/passwd"],
    [".", "/workspace"],
    ["dir/", "/workspace/dir/"],
    ["a/../b", "/workspace/b"],
    ["/etc/hosts", "/etc/hosts"],
    ["/workspace/../etc", "/workspace/../etc"], // absolute: Tether judges it as sent
    ["", ""],
  ];
  for (const [path, want] of cases) assert.equal(resolveSandboxPath("/workspace", path), want, path);
  assert.equal(resolveSandboxPath("/home/app", "src/a.ts"), "/home/app/src/a.ts");
});

test("relative paths in uploadFiles, downloadFiles and the file tools are taken from the working directory", async (t) => {
  const sb = await TetherSandbox.create({ client, provider: "local", labels, initialFiles: { "seed/init.txt": "seeded" } });
  t.after(() => sb.close());
  assert.equal(sb.workDir, "/workspace");
  assert.equal(text(await client.readFile(sb.id, "/workspace/seed/init.txt")), "seeded", "initialFiles resolve too");

  const up = await sb.uploadFiles([
    ["rel/a.txt", bytes("a")],
    ["./rel/b.txt", bytes("b")],
    ["rel/sub/../c.txt", bytes("c")],
    ["../tmp/d.txt", bytes("d")],
    ["../etc/e.txt", bytes("e")],
  ]);
  assert.deepEqual(up, [
    { path: "rel/a.txt", error: null },
    { path: "./rel/b.txt", error: null },
    { path: "rel/sub/../c.txt", error: null },
    { path: "../tmp/d.txt", error: null },
    { path: "../etc/e.txt", error: "invalid_path" }, // /etc/e.txt: outside /workspace and /tmp
  ]);
  for (const [abs, want] of [["/workspace/rel/a.txt", "a"], ["/workspace/rel/b.txt", "b"], ["/workspace/rel/c.txt", "c"], ["/tmp/d.txt", "d"]]) {
    assert.equal(text(await client.readFile(sb.id, abs ?? "")), want, abs);
  }

  const down = await sb.downloadFiles(["rel/a.txt", "./rel/../rel/c.txt", "rel/missing", "rel"]);
  assert.deepEqual(down.map((d) => [d.path, d.content === null ? null : text(d.content), d.error]), [
    ["rel/a.txt", "a", null],
    ["./rel/../rel/c.txt", "c", null],
    ["rel/missing", null, "file_not_found"],
    ["rel", null, "is_directory"],
  ]);

  assert.equal((await sb.write("notes/n.txt", "one\ntwo\n")).error, undefined);
  assert.match(String((await sb.read("notes/n.txt")).content), /two/);
  assert.equal((await sb.edit("notes/n.txt", "two", "three")).occurrences, 1);
  assert.equal(text(await client.readFile(sb.id, "/workspace/notes/n.txt")), "one\nthree\n");
  assert.deepEqual((await sb.ls("notes")).files?.map((f) => f.path), ["notes/n.txt"]);
});

test("after close(), execute, uploadFiles and downloadFiles throw NOT_INITIALIZED without a request", async () => {
  const spied = spiedClient();
  const sb = await TetherSandbox.create({ client: spied.client, provider: "local", labels });
  await sb.close();
  assert.equal(sb.isRunning, false);
  const sent = spied.requests.length;
  await assert.rejects(sb.execute("true"), isCode("NOT_INITIALIZED"));
  await assert.rejects(sb.uploadFiles([["/workspace/x", bytes("x")]]), isCode("NOT_INITIALIZED"));
  await assert.rejects(sb.downloadFiles(["/workspace/x"]), isCode("NOT_INITIALIZED"));
  await assert.rejects(sb.initialize(), isCode("ALREADY_INITIALIZED"));
  await sb.close(); // idempotent
  assert.equal(spied.requests.length, sent, "no request after close()");

  const fresh = new TetherSandbox({ client: spied.client, provider: "local", labels });
  await assert.rejects(fresh.execute("true"), isCode("NOT_INITIALIZED"));
  await assert.rejects(fresh.downloadFiles(["/workspace/x"]), isCode("NOT_INITIALIZED"));
  assert.equal(spied.requests.length, sent, "no request before initialize()");
});

test("transport and state failures are TetherSandboxErrors with deepagents' codes, the TetherError behind them", async (t) => {
  const spied = spiedClient();
  const sb = await TetherSandbox.create({ client: spied.client, provider: "local", labels });
  t.after(() => sb.close().catch(() => undefined));

  // The sandbox ended behind the backend's back: a state failure.
  await client.deleteSandbox(sb.id);
  await assert.rejects(sb.execute("true"), (err: unknown) => {
    isCode("COMMAND_FAILED")(err);
    const e = err as TetherSandboxError;
    assert.equal(e.tether?.code, "SANDBOX_STATE_CONFLICT");
    assert.equal(e.tether?.state, "terminated");
    assert.equal(e.cause, e.tether);
    assert.ok(e.message.includes(sb.id));
    return true;
  });
  await assert.rejects(sb.uploadFiles([["/workspace/x", bytes("x")]]), isCode("FILE_OPERATION_FAILED"));
  await assert.rejects(sb.downloadFiles(["/workspace/x"]), isCode("FILE_OPERATION_FAILED"));

  // Tether unreachable: a transport failure.
  spied.cut();
  await assert.rejects(sb.execute("true"), (err: unknown) => isCode("COMMAND_FAILED")(err) && (err as TetherSandboxError).tether?.code === "UNAVAILABLE");
  await assert.rejects(sb.downloadFiles(["/workspace/x"]), (err: unknown) => isCode("FILE_OPERATION_FAILED")(err) && (err as TetherSandboxError).tether?.status === 0);
  await assert.rejects(sb.close(), isCode("UNAVAILABLE"));
  assert.equal(sb.isRunning, false);

  await assert.rejects(TetherSandbox.create({ client, provider: "no-such-provider", labels }), (err: unknown) =>
    isCode("SANDBOX_CREATION_FAILED")(err) && (err as TetherSandboxError).tether?.code === "UNKNOWN_PROVIDER");
  await assert.rejects(TetherSandbox.create({ baseUrl: client.baseUrl, apiKey: "wrong", provider: "local", labels }), isCode("AUTHENTICATION_FAILED"));
  await assert.rejects(TetherSandbox.create({ client, provider: "local", labels, setup: "exit 3" }), (err: unknown) =>
    isCode("SANDBOX_CREATION_FAILED")(err) && (err as TetherSandboxError).tether?.state === "failed");
  await assert.rejects(TetherSandbox.connect("sbx_nope", { client }), (err: unknown) =>
    isCode("SANDBOX_NOT_FOUND")(err) && (err as TetherSandboxError).tether?.code === "NOT_FOUND");
  await assert.rejects(TetherSandbox.connect(sb.id, { client }), isCode("SANDBOX_NOT_FOUND"));
});

test("one owner lease per process: sandboxes of many clients share one owner and one heartbeat", async (t) => {
  // Each create makes its own TetherClient (from TETHER_URL and TETHER_API_KEY).
  const sandboxes = await Promise.all([1, 2, 3].map(() => TetherSandbox.create({ provider: "local", labels })));
  t.after(() => Promise.all(sandboxes.map((s) => s.close())));
  const clients = new Set(sandboxes.map((s) => s.client));
  assert.equal(clients.size, 3, "three clients");
  const leases = new Set(sandboxes.map((s) => s.lease));
  assert.equal(leases.size, 1, "one lease");
  const [lease] = [...leases];
  assert.ok(lease);
  assert.equal(lease, processOwner(new TetherClient()));
  assert.equal(lease, processOwner(client), "the tests' own client shares it too");
  assert.ok(lease.holds >= 3);
  assert.equal(lease.beating, true);
  const listed = await client.listSandboxes({ owner: lease.owner, released: false });
  for (const s of sandboxes) assert.ok(listed.items.some((i) => i.id === s.id), `${s.id} is owned by ${lease.owner}`);

  const other = new TetherClient({ baseUrl: client.baseUrl, apiKey: "another-key" });
  assert.notEqual(processOwner(other), lease, "another API key is another tenant: another lease");
});

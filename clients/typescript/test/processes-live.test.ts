import { test } from "node:test";
import assert from "node:assert/strict";
import { TetherClient, TetherError, type ProcessExit, type WebSocketConstructor } from "../src/index.js";
import { liveClient, text } from "./helpers.js";

// Processes, terminals and watches against a live Tether, in real local
// (bubblewrap) sandboxes.

async function localSandbox(client: TetherClient, t: { after: (fn: () => Promise<unknown>) => void }): Promise<string> {
  const created = await client.createSandbox({ provider: "local", labels: { suite: "ts-processes" } });
  t.after(() => client.deleteSandbox(created.id));
  const sb = await client.waitSandbox(created.id, { timeoutMs: 60_000 });
  assert.equal(sb.state, "ready");
  return sb.id;
}

test("a dev server in the background: a watch, a second client from the start, SIGTERM", async (t) => {
  const client = liveClient();
  const id = await localSandbox(client, t);
  const local = (await client.listProviders()).items.find((p) => p.name === "local");
  assert.ok(local?.capabilities.processes && local.capabilities.pty && local.capabilities.watch);

  const watch = client.watch(id, "/workspace", { recursive: true });
  const first = await watch.next();
  assert.deepEqual(first.value, { type: "start", path: "/workspace", recursive: true });
  const written = (async () => {
    for await (const ev of watch) {
      if (ev.type !== "start" && ev.path === "index.html" && (ev.kind === "create" || ev.kind === "write")) return ev;
    }
    throw new Error("the watch ended");
  })();

  const server = await client.startProcess(id, {
    command: "python3 -m http.server 8000 --bind 127.0.0.1", env: { PYTHONUNBUFFERED: "1" }, cwd: "/workspace", tag: "devserver",
  });
  assert.equal(server.running, true);
  assert.equal(server.tag, "devserver");
  assert.deepEqual(server.argv, ["sh", "-c", "python3 -m http.server 8000 --bind 127.0.0.1"]);

  assert.equal((await client.exec(id, { command: "echo hello from exec > /workspace/index.html" })).exit_code, 0);
  const change = await written;
  assert.equal(change.is_dir, false);

  let res = await client.fetchPort(id, 8000, "index.html");
  for (const deadline = Date.now() + 30_000; res.status !== 200 && Date.now() < deadline; ) {
    await new Promise((r) => setTimeout(r, 100));
    res = await client.fetchPort(id, 8000, "index.html");
  }
  assert.equal(await res.text(), "hello from exec\n");

  // A second client attaches from the start: the banner, the request's log line.
  const other = new TetherClient({ baseUrl: client.baseUrl, apiKey: process.env["TETHER_API_KEY"] });
  const events = other.processOutput(id, "devserver", { from: "start" });
  let out = "";
  let exit: ProcessExit | undefined;
  let signalled = false;
  for await (const ev of events) {
    if (ev.type === "start") assert.equal(ev.pid, server.pid);
    if (ev.type === "stdout" || ev.type === "stderr") out += ev.data;
    if (!signalled && out.includes('"GET /index.html HTTP/1.1" 200')) {
      signalled = true;
      await client.signalProcess(id, "devserver", "TERM");
    }
    if (ev.type === "exit") exit = ev.exit;
  }
  assert.match(out, /Serving HTTP on 127\.0\.0\.1 port 8000/);
  assert.ok(exit && (exit.code === 143 || (exit.code === -1 && exit.signal === 15 && !exit.exited)), JSON.stringify(exit));

  const done = await client.waitProcess(id, server.pid, { timeoutMs: 30_000 });
  assert.equal(done.running, false);
  assert.deepEqual(done.exit, exit);
  assert.ok((await client.listProcesses(id)).items.some((p) => p.pid === server.pid));

  await assert.rejects(client.signalProcess(id, server.pid, "KILL"), (err: unknown) => err instanceof TetherError && err.code === "PROCESS_STATE_CONFLICT" && err.status === 409);
  await assert.rejects(client.getProcess(id, "nosuchtag"), (err: unknown) => err instanceof TetherError && err.code === "PROCESS_NOT_FOUND" && err.status === 404);
  await assert.rejects(client.openTerminal(id, server.pid), (err: unknown) => err instanceof TetherError && err.code === "PROCESS_STATE_CONFLICT");
});

test("a terminal over the WebSocket: stty size, vi resized, a second client, the exit", async (t) => {
  const client = liveClient();
  const id = await localSandbox(client, t);
  const p = await client.startProcess(id, { argv: ["sh"], pty: { rows: 24, cols: 80 }, env: { PS1: "$ " }, tag: "shell" });
  assert.deepEqual(p.pty, { rows: 24, cols: 80 });
  const term = await client.openTerminal(id, p.pid);
  t.after(() => term.close());
  let screen = "";
  // Reads until the screen holds want (or, want empty, the exit); fails
  // after 20 s, showing the screen.
  const until = async (want: string): Promise<ProcessExit | undefined> => {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no ${JSON.stringify(want)} in 20 s; screen ${JSON.stringify(screen.slice(-1500))}`)), 20_000);
    });
    const read = (async () => {
      for await (const ev of term) {
        if (ev.type === "error") throw ev.error;
        if (ev.type === "exit") return ev.exit;
        if (ev.type === "output") screen += ev.text;
        if (want && screen.includes(want)) return undefined;
      }
      throw new Error(`the terminal ended before ${JSON.stringify(want)}; screen ${JSON.stringify(screen.slice(-500))}`);
    })();
    try {
      return await Promise.race([read, late]);
    } finally {
      clearTimeout(timer);
    }
  };
  term.write("stty size\r");
  await until("24 80\r\n");
  term.resize(30, 100); // a control frame
  term.write("stty size\r");
  await until("30 100\r\n");

  // vi, full screen: it draws its empty lines as a tilde and spaces to the
  // width, and draws them again at a new size.
  screen = "";
  term.write("vi /workspace/typed.txt\r");
  await until(`~${" ".repeat(99)}`);
  screen = "";
  await client.resizeProcess(id, "shell", { rows: 40, cols: 120 }); // the REST route
  await until(`~${" ".repeat(119)}`);
  term.write(":!stty size\r"); // vi's shell sees the new size
  await until("Press ENTER");
  assert.match(screen, /40 120\r\n/);
  screen = "";
  term.write("\r");
  term.write("ihello from vi\x1b:wq\r");
  await until("written");
  await until("\x1b[?1049l"); // vi left the alternate screen
  assert.equal(text(await client.readFile(id, "/workspace/typed.txt")), "hello from vi\n");

  // A second client, by tag, with the key in the subprotocol list (as
  // browsers send it): the screen is drawn again from the start.
  const name = "ws"; // the ws package, as a WHATWG-style WebSocket class
  const { WebSocket: Ws } = (await import(name)) as { WebSocket: WebSocketConstructor };
  const again = await client.openTerminal(id, "shell", { WebSocket: globalThis.WebSocket ? undefined : Ws, signal: AbortSignal.timeout(20_000) });
  let seen = "";
  for await (const ev of again) { // aborted after 20 s: the loop ends
    if (ev.type === "output") seen += ev.text;
    if (seen.includes("hello from vi")) break;
  }
  assert.ok(seen.includes("hello from vi"), `the second client's screen: ${JSON.stringify(seen.slice(-500))}`);
  again.close();

  term.write("exit 5\r");
  const exit = await until("");
  assert.equal(exit?.code, 5);
  for await (const _ of term) assert.fail("nothing after the exit");
  assert.equal(term.ended, true);
  assert.equal(term.exit?.code, 5);
});

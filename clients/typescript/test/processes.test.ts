import { test } from "node:test";
import assert from "node:assert/strict";
import {
  Terminal, TetherClient, TetherError,
  type ProcessOutputEvent, type WatchEvent, type WebSocketConstructor, type WebSocketLike, type WebSocketLikeEvent,
} from "../src/index.js";

// Processes, terminals and watches without a server: a fake fetch and a
// fake WebSocket (processes-live.test.ts runs them on a live Tether).

const problem = (status: number, code: string, detail: string): Response =>
  new Response(JSON.stringify({ type: "about:blank", title: code, status, code, detail }), {
    status, headers: { "Content-Type": "application/problem+json", "X-Request-ID": "rid" },
  });

const stream = (body: string): Response => new Response(body, { status: 200, headers: { "Content-Type": "text/event-stream" } });

/** A WebSocket the test drives: it records what is sent, and fires what the test says. */
class FakeSocket implements WebSocketLike {
  static last: FakeSocket | undefined;
  static openIt = true;
  binaryType = "blob";
  readyState = 0;
  sent: Array<string | Uint8Array> = [];
  readonly listeners = new Map<string, Array<(ev: WebSocketLikeEvent) => void>>();
  constructor(readonly url: string, readonly protocols?: string | string[]) {
    FakeSocket.last = this;
    setTimeout(() => (FakeSocket.openIt ? this.open() : this.fire("close", { code: 1006, reason: "" })), 0);
  }
  addEventListener(type: string, listener: (ev: WebSocketLikeEvent) => void): void {
    this.listeners.set(type, [...(this.listeners.get(type) ?? []), listener]);
  }
  fire(type: string, ev: WebSocketLikeEvent): void {
    if (type === "close") this.readyState = 3;
    for (const l of this.listeners.get(type) ?? []) l(ev);
  }
  open(): void {
    this.readyState = 1;
    this.fire("open", {});
  }
  send(data: string | Uint8Array): void {
    this.sent.push(data);
  }
  close(code = 1000, reason = ""): void {
    this.fire("close", { code, reason });
  }
}
const FakeWebSocket: WebSocketConstructor = FakeSocket;

test("the process routes' refusals are TetherErrors with the process codes", async () => {
  const seen: string[] = [];
  const fake: typeof fetch = async (input, init) => {
    const req = new Request(input, init);
    seen.push(`${req.method} ${new URL(req.url).pathname}${new URL(req.url).search}`);
    return req.url.includes("/processes/7") ? problem(404, "PROCESS_NOT_FOUND", "no process 7") : problem(409, "PROCESS_STATE_CONFLICT", "process dev has ended");
  };
  const c = new TetherClient({ baseUrl: "http://tether.invalid", apiKey: "k", fetch: fake });
  const is = (code: string, status: number) => (err: unknown) =>
    err instanceof TetherError && err.code === code && err.status === status && err.requestId === "rid";
  await assert.rejects(c.getProcess("sbx_1", 7, { wait: "5s" }), is("PROCESS_NOT_FOUND", 404));
  await assert.rejects(c.waitProcess("sbx_1", 7), is("PROCESS_NOT_FOUND", 404));
  await assert.rejects(async () => { for await (const _ of c.processOutput("sbx_1", 7, { from: "start" })) { /* nothing */ } }, is("PROCESS_NOT_FOUND", 404));
  await assert.rejects(c.writeStdin("sbx_1", "dev", "x"), is("PROCESS_STATE_CONFLICT", 409));
  await assert.rejects(c.closeStdin("sbx_1", "dev"), is("PROCESS_STATE_CONFLICT", 409));
  await assert.rejects(c.signalProcess("sbx_1", "dev", "KILL"), is("PROCESS_STATE_CONFLICT", 409));
  await assert.rejects(c.resizeProcess("sbx_1", "dev", { rows: 30, cols: 100 }), is("PROCESS_STATE_CONFLICT", 409));
  assert.deepEqual(seen, [
    "GET /v1/sandboxes/sbx_1/processes/7?wait=5s",
    "GET /v1/sandboxes/sbx_1/processes/7?wait=30s",
    "GET /v1/sandboxes/sbx_1/processes/7/output?from=start",
    "POST /v1/sandboxes/sbx_1/processes/dev/stdin",
    "POST /v1/sandboxes/sbx_1/processes/dev/stdin?close=true",
    "POST /v1/sandboxes/sbx_1/processes/dev/signal",
    "POST /v1/sandboxes/sbx_1/processes/dev/resize",
  ]);
  assert.throws(() => c.getProcess("sbx_1", 0), RangeError);
  await assert.rejects(c.writeStdin("sbx_1", 1.5, "x"), RangeError);
});

test("a terminal that does not open rejects with the process's error", async () => {
  const answers: Response[] = [];
  const fake: typeof fetch = async () => answers.shift() ?? problem(500, "INTERNAL", "unexpected");
  const c = new TetherClient({ baseUrl: "http://tether.invalid", apiKey: "k", fetch: fake });
  FakeSocket.openIt = false;
  try {
    answers.push(problem(404, "PROCESS_NOT_FOUND", "no process 9"));
    await assert.rejects(c.openTerminal("sbx_1", 9, { WebSocket: FakeWebSocket }), (err: unknown) => err instanceof TetherError && err.code === "PROCESS_NOT_FOUND");
    assert.equal(FakeSocket.last?.url, "ws://tether.invalid/v1/sandboxes/sbx_1/processes/9/terminal?from=start");
    assert.deepEqual(FakeSocket.last?.protocols, ["tether.v1", "tether.bearer.k"]);
    answers.push(new Response(JSON.stringify({ pid: 9, argv: ["cat"], running: true, stdin: false, tag: "", cwd: "/", env: {}, started_at: "2026-01-02T15:04:05Z", kept_bytes: 0, dropped_bytes: 0 }), { status: 200, headers: { "Content-Type": "application/json" } }));
    await assert.rejects(c.openTerminal("sbx_1", 9, { WebSocket: FakeWebSocket }), (err: unknown) => err instanceof TetherError && err.code === "PROCESS_STATE_CONFLICT" && err.status === 409);
  } finally {
    FakeSocket.openIt = true;
  }
});

test("a terminal's frames: keystrokes and resizes out, screen, errors and exit in", async () => {
  const c = new TetherClient({ baseUrl: "https://tether.invalid", apiKey: "k", fetch: async () => problem(500, "INTERNAL", "no") });
  const term = await c.openTerminal("sbx_1", "shell", { WebSocket: FakeWebSocket, from: "now" });
  const ws = FakeSocket.last!;
  assert.equal(ws.url, "wss://tether.invalid/v1/sandboxes/sbx_1/processes/shell/terminal?from=now");
  assert.equal(ws.binaryType, "arraybuffer");
  term.write("ls\r");
  term.resize(30, 100);
  assert.deepEqual(ws.sent[0], new TextEncoder().encode("ls\r"));
  assert.equal(ws.sent[1], '{"resize":{"rows":30,"cols":100}}');
  const euro = new TextEncoder().encode("€"); // split between two frames
  ws.fire("message", { data: euro.slice(0, 1).buffer });
  ws.fire("message", { data: euro.slice(1).buffer });
  ws.fire("message", { data: '{"dropped":{"bytes":5,"offset":10}}' });
  ws.fire("message", { data: '{"error":{"type":"about:blank","title":"t","status":409,"code":"PROCESS_STATE_CONFLICT","detail":"ended"}}' });
  ws.fire("message", { data: '{"exit":{"code":5,"signal":0,"exited":true,"status":"exit status 5"}}' });
  ws.fire("close", { code: 1000, reason: "the process ended" });
  const got: string[] = [];
  for await (const ev of term) {
    if (ev.type === "output") got.push(`output:${ev.data.length}:${ev.text}`);
    else if (ev.type === "dropped") got.push(`dropped:${ev.bytes}@${ev.offset}`);
    else if (ev.type === "error") got.push(`error:${ev.error.code}`);
    else got.push(`exit:${ev.exit.code}`);
  }
  assert.deepEqual(got, ["output:1:", "output:2:€", "dropped:5@10", "error:PROCESS_STATE_CONFLICT", "exit:5"]);
  assert.equal(term.exit?.code, 5);
  assert.throws(() => term.write("x"), (err: unknown) => err instanceof TetherError && err.code === "UNAVAILABLE");

  // A session the server ends on an error (1011) rejects with it.
  const broken = await c.openTerminal("sbx_1", 3, { WebSocket: FakeWebSocket });
  const ws2 = FakeSocket.last!;
  ws2.fire("message", { data: '{"error":{"type":"about:blank","title":"t","status":503,"code":"PROVIDER_UNAVAILABLE","detail":"gone"}}' });
  ws2.fire("close", { code: 1011, reason: "the terminal failed" });
  await assert.rejects(async () => { for await (const _ of broken) { /* the error event, then the failure */ } },
    (err: unknown) => err instanceof TetherError && err.code === "PROVIDER_UNAVAILABLE");
  // close() ends iterating without an error; the process goes on.
  const mine = await c.openTerminal("sbx_1", 3, { WebSocket: FakeWebSocket });
  mine.close();
  for await (const _ of mine) assert.fail("no event after close");
  assert.equal(mine.ended, true);
  assert.ok(Terminal);
});

test("output and watch streams parse into their events", async () => {
  const output = "event: start\ndata: {\"pid\":7}\n\n: keep-alive\n\n" +
    "event: pty\ndata: {\"data\":\"\",\"data_base64\":\"AP8=\",\"offset\":0}\n\n" +
    "event: dropped\ndata: {\"bytes\":3,\"offset\":2}\n\n" +
    "event: stdout\ndata: {\"data\":\"hi\\n\",\"offset\":5}\n\n" +
    "event: exit\ndata: {\"code\":-1,\"signal\":15,\"exited\":false,\"status\":\"signal: terminated\"}\n\n";
  const watch = "event: start\ndata: {\"path\":\"/workspace\",\"recursive\":true}\n\n" +
    "event: write\ndata: {\"kind\":\"write\",\"path\":\"a.txt\",\"is_dir\":false,\"at\":\"2026-01-02T15:04:05Z\"}\n\n" +
    "event: error\ndata: {\"type\":\"about:blank\",\"title\":\"t\",\"status\":409,\"code\":\"SANDBOX_STATE_CONFLICT\",\"detail\":\"ended\",\"state\":\"terminated\"}\n\n";
  const urls: string[] = [];
  const fake: typeof fetch = async (input, init) => {
    const req = new Request(input, init);
    urls.push(req.url);
    assert.equal(req.headers.get("Accept"), "text/event-stream");
    return stream(req.url.includes("/watch") ? watch : output);
  };
  const c = new TetherClient({ baseUrl: "http://tether.invalid", apiKey: "k", fetch: fake });
  const events: ProcessOutputEvent[] = [];
  for await (const ev of c.processOutput("sbx_1", "dev", { from: "start", encoding: "base64" })) events.push(ev);
  assert.deepEqual(events, [
    { type: "start", pid: 7 },
    { type: "pty", data: "", offset: 0, bytes: new Uint8Array([0, 255]) },
    { type: "dropped", bytes: 3, offset: 2 },
    { type: "stdout", data: "hi\n", offset: 5 },
    { type: "exit", exit: { code: -1, signal: 15, exited: false, status: "signal: terminated" } },
  ]);
  const changes: WatchEvent[] = [];
  await assert.rejects(async () => {
    for await (const ev of c.watch("sbx_1", "/workspace", { recursive: true })) changes.push(ev);
  }, (err: unknown) => err instanceof TetherError && err.code === "SANDBOX_STATE_CONFLICT" && err.state === "terminated");
  assert.deepEqual(changes, [
    { type: "start", path: "/workspace", recursive: true },
    { type: "write", kind: "write", path: "a.txt", is_dir: false, at: "2026-01-02T15:04:05Z" },
  ]);
  assert.deepEqual(urls, [
    "http://tether.invalid/v1/sandboxes/sbx_1/processes/dev/output?from=start&encoding=base64",
    "http://tether.invalid/v1/sandboxes/sbx_1/watch?path=%2Fworkspace&recursive=true",
  ]);
});

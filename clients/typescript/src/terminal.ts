import type { components } from "./schema.js";
import { TetherError, isProblem } from "./errors.js";

type Schemas = components["schemas"];
type ProcessExit = Schemas["ProcessExit"];

/** What a Terminal's WebSocket hands its listeners (of the WHATWG WebSocket, or of the ws package's). */
export interface WebSocketLikeEvent {
  /** A message's data: a string (text frame) or an ArrayBuffer (binary frame). */
  data?: unknown;
  /** A close's code and reason. */
  code?: number;
  reason?: string;
  /** An error's message (ws) or error. */
  message?: string;
  error?: unknown;
}

/** The part of a WebSocket a Terminal uses: the WHATWG WebSocket (browsers, Node 22) and the ws package's both are one. */
export interface WebSocketLike {
  binaryType: string;
  readonly readyState: number;
  send(data: string | Uint8Array): void;
  close(code?: number, reason?: string): void;
  addEventListener(type: "open" | "message" | "close" | "error", listener: (ev: WebSocketLikeEvent) => void): void;
}

/** A WebSocket class, as the WHATWG WebSocket's constructor is. */
export type WebSocketConstructor = new (url: string, protocols?: string | string[]) => WebSocketLike;

/** One event of a terminal (TetherClient.openTerminal). */
export type TerminalEvent =
  /** Bytes of the screen; text is them decoded as UTF-8 (a character split between frames comes whole in the later one). */
  | { type: "output"; data: Uint8Array; text: string }
  /** Output that fell out of the kept window before this client read it. */
  | { type: "dropped"; bytes: number; offset: number }
  /** A refusal that does not end the session (a bad frame, input to an ended process). */
  | { type: "error"; error: TetherError }
  /** The process ended; the server closes the connection after it. */
  | { type: "exit"; exit: ProcessExit };

const OPEN = 1;

/**
 * A client's WebSocket to a process's terminal (TetherClient.openTerminal):
 * write keystrokes, resize it, and iterate its events (for await) until
 * the process ends and the server closes the connection. Iterating ends
 * without error after an exit, or after close(); a connection that ended
 * otherwise rejects with a TetherError (the server's error frame, or
 * UNAVAILABLE). Leaving a for-await loop early does not close the
 * terminal: a later loop goes on from where it left; close() does.
 * Closing leaves the process running.
 */
export class Terminal implements AsyncIterable<TerminalEvent> {
  /** The process, as it was named (its pid, or its tag). */
  readonly pid: string;
  readonly #ws: WebSocketLike;
  readonly #queue: TerminalEvent[] = [];
  #wake: (() => void) | undefined;
  #ended = false;
  #closedByUs = false;
  #failure: TetherError | undefined;
  #lastError: TetherError | undefined;
  #exit: ProcessExit | undefined;
  readonly #decoder = new TextDecoder();
  readonly #encoder = new TextEncoder();

  /** Made by TetherClient.openTerminal, around a WebSocket it made (open, or opening). */
  constructor(ws: WebSocketLike, pid: string) {
    this.pid = pid;
    this.#ws = ws;
    ws.binaryType = "arraybuffer";
    ws.addEventListener("message", (ev) => this.#message(ev.data));
    ws.addEventListener("close", (ev) => this.#close(ev.code ?? 1006, ev.reason ?? ""));
  }

  /** The process's exit, once its exit frame came; undefined before. */
  get exit(): ProcessExit | undefined {
    return this.#exit;
  }

  /** Reports whether the connection ended (the process's end, close(), or a failure). */
  get ended(): boolean {
    return this.#ended;
  }

  /** Types data into the terminal (a string is sent as its UTF-8 bytes): "\r" is Enter, "\x03" ^C, "\x04" ^D. */
  write(data: string | Uint8Array): void {
    this.#open().send(typeof data === "string" ? this.#encoder.encode(data) : data);
  }

  /** Sets the terminal's size; the program gets SIGWINCH. A refusal comes back as an error event. */
  resize(rows: number, cols: number): void {
    this.#open().send(JSON.stringify({ resize: { rows, cols } }));
  }

  /** Closes the connection; the process goes on (another client may attach again). */
  close(): void {
    this.#closedByUs = true;
    if (!this.#ended) this.#ws.close(1000, "the client closed the terminal");
  }

  [Symbol.asyncIterator](): AsyncIterator<TerminalEvent> {
    return { next: () => this.#next() };
  }

  #open(): WebSocketLike {
    if (this.#ended || this.#ws.readyState !== OPEN) {
      throw new TetherError({ code: "UNAVAILABLE", status: 0, message: `the terminal of process ${this.pid} is closed` });
    }
    return this.#ws;
  }

  async #next(): Promise<IteratorResult<TerminalEvent>> {
    for (;;) {
      const ev = this.#queue.shift();
      if (ev !== undefined) return { value: ev, done: false };
      if (this.#ended) {
        if (this.#failure) throw this.#failure;
        return { value: undefined, done: true };
      }
      await new Promise<void>((resolve) => { this.#wake = resolve; });
    }
  }

  #push(ev: TerminalEvent): void {
    this.#queue.push(ev);
    this.#notify();
  }

  #notify(): void {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }

  #message(data: unknown): void {
    if (typeof data === "string") {
      let ctl: unknown;
      try {
        ctl = JSON.parse(data);
      } catch {
        return; // not a control frame of this protocol
      }
      const rec = typeof ctl === "object" && ctl !== null ? (ctl as Record<string, unknown>) : {};
      const exit = rec["exit"];
      const dropped = rec["dropped"];
      const error = rec["error"];
      if (typeof exit === "object" && exit !== null) {
        this.#exit = exit as ProcessExit;
        this.#push({ type: "exit", exit: this.#exit });
      } else if (typeof dropped === "object" && dropped !== null) {
        const d = dropped as { bytes?: unknown; offset?: unknown };
        this.#push({ type: "dropped", bytes: Number(d.bytes ?? 0), offset: Number(d.offset ?? 0) });
      } else if (error !== undefined) {
        const err = isProblem(error)
          ? TetherError.fromProblem(error)
          : new TetherError({ code: "INTERNAL", status: 0, message: `terminal error: ${JSON.stringify(error).slice(0, 300)}` });
        this.#lastError = err;
        this.#push({ type: "error", error: err });
      }
      return;
    }
    let bytes: Uint8Array;
    if (data instanceof ArrayBuffer) bytes = new Uint8Array(data);
    else if (ArrayBuffer.isView(data)) bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    else return;
    this.#push({ type: "output", data: bytes, text: this.#decoder.decode(bytes, { stream: true }) });
  }

  #close(code: number, reason: string): void {
    if (this.#ended) return;
    this.#ended = true;
    if (this.#exit === undefined && !this.#closedByUs && code !== 1000) {
      this.#failure = this.#lastError ?? new TetherError({
        code: "UNAVAILABLE", status: 0,
        message: `the terminal of process ${this.pid} closed (${code}${reason ? ` ${reason}` : ""}) before the process ended`,
      });
    }
    this.#notify();
  }
}

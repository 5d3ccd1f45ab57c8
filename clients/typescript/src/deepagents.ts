import {
  BaseSandbox,
  SandboxError,
  type ExecuteResponse,
  type FileDownloadResponse,
  type FileOperationError,
  type FileUploadResponse,
} from "deepagents";
import { TetherClient, newSandboxId, type CreateSandboxRequest, type Sandbox, type TetherClientOptions } from "./client.js";
import { TetherError, type ProblemCode } from "./errors.js";
import { OwnerLease, processOwner } from "./owner.js";

/** The server's file error codes, as deepagents' error literals. */
export const FILE_ERRORS: Readonly<Partial<Record<ProblemCode, FileOperationError>>> = Object.freeze({
  FILE_NOT_FOUND: "file_not_found",
  PERMISSION_DENIED: "permission_denied",
  IS_DIRECTORY: "is_directory",
  INVALID_PATH: "invalid_path",
});

function fileError(err: unknown): FileOperationError | undefined {
  return err instanceof TetherError ? FILE_ERRORS[err.code] : undefined;
}

export interface TetherSandboxOptions extends TetherClientOptions {
  /** The client to use; default: one made from baseUrl/apiKey (or env). */
  client?: TetherClient | undefined;
  /** The owner lease the sandbox is bound to; default: the process's (processOwner). */
  lease?: OwnerLease | undefined;
  /**
   * Default command timeout in seconds, used when execute() is given none;
   * 0 means no limit of ours (the server's maximum). Default: the server's (60 s).
   */
  defaultTimeout?: number | undefined;
}

export interface TetherSandboxCreateOptions extends TetherSandboxOptions {
  /** The provider (default: the server's default). */
  provider?: string | undefined;
  /** The sandbox's lifetime in seconds (default: the server's). */
  ttlSeconds?: number | undefined;
  env?: Record<string, string> | undefined;
  labels?: Record<string, string> | undefined;
  /** Provider-specific options. */
  params?: CreateSandboxRequest["params"];
  /** A shell script run before the sandbox counts as ready. */
  setup?: string | undefined;
  /**
   * Files written into the sandbox before it is handed out (path → content;
   * parent folders are made). A file that cannot be written fails the
   * creation, and the sandbox is deleted.
   */
  initialFiles?: Record<string, string | Uint8Array> | undefined;
  /** How long to wait for the sandbox to become ready, in ms (default 120 000). */
  readyTimeoutMs?: number | undefined;
  /** Aborting a create in progress deletes the sandbox it requested. */
  signal?: AbortSignal | undefined;
}

export interface ExecuteOptions {
  /**
   * Seconds the command may run: undefined means the sandbox's default
   * timeout (defaultTimeout, else the server's 60 s), 0 means no limit
   * (the server's maximum), as in deepagents' sandboxes.
   */
  timeout?: number | undefined;
  /** Aborting ends the command. */
  signal?: AbortSignal | undefined;
}

function notReady(sb: Sandbox): TetherError {
  return new TetherError({
    code: "SANDBOX_STATE_CONFLICT",
    status: 409,
    state: sb.state,
    message: `sandbox ${sb.id} is ${sb.state}, not ready${sb.error ? `: ${sb.error}` : ""}`,
  });
}

/**
 * A deepagents sandbox backend on a Tether sandbox: deepagents derives
 * ls/read/write/edit/grep/glob from execute, uploadFiles and downloadFiles.
 *
 * `TetherSandbox.create(options)` makes a ready one in one step; `new
 * TetherSandbox(options)` then `initialize()` in two (its id is chosen at
 * construction, and the create is idempotent on it). `isRunning` is true
 * from a successful initialize until `close()`.
 */
export class TetherSandbox extends BaseSandbox {
  #id: string;
  readonly client: TetherClient;
  readonly lease: OwnerLease;
  readonly defaultTimeout: number | undefined;
  /** The sandbox as Tether last reported it; null before initialize(). */
  sandbox: Sandbox | null = null;
  readonly #options: TetherSandboxCreateOptions;
  #state: "new" | "initializing" | "running" | "closed" = "new";

  /**
   * An uninitialized sandbox: nothing is requested until initialize().
   * Options as for TetherSandbox.create.
   */
  constructor(options: TetherSandboxCreateOptions = {}) {
    super();
    this.client = options.client ?? new TetherClient(options);
    this.lease = options.lease ?? processOwner(this.client);
    this.defaultTimeout = options.defaultTimeout;
    this.#options = options;
    this.#id = newSandboxId();
  }

  /** The Tether sandbox id (chosen before initialize, final once it succeeds). */
  get id(): string {
    return this.#id;
  }

  /** The sandbox's working directory (e.g. /workspace); null before initialize. */
  get workDir(): string | null {
    return this.sandbox?.work_dir ?? null;
  }

  /** Whether the sandbox is initialized (ready) and not closed. */
  get isRunning(): boolean {
    return this.#state === "running";
  }

  /**
   * Requests a sandbox owned by the process's owner lease, waits until it is
   * ready, and keeps the lease heartbeated while it lives. A create that
   * fails or is aborted deletes the sandbox it requested.
   */
  static async create(options: TetherSandboxCreateOptions = {}): Promise<TetherSandbox> {
    const sandbox = new TetherSandbox(options);
    await sandbox.initialize();
    return sandbox;
  }

  /**
   * Creates the sandbox: requests it, waits until it is ready, writes the
   * initialFiles. Throws SandboxError ALREADY_INITIALIZED if called twice;
   * after a failure (the sandbox it requested is deleted) it may be called
   * again, with a new id.
   */
  async initialize(): Promise<void> {
    if (this.#state !== "new") {
      throw new SandboxError(`sandbox ${this.#id} is already initialized (${this.#state})`, "ALREADY_INITIALIZED");
    }
    this.#state = "initializing";
    let sb: Sandbox;
    try {
      sb = await this.#create();
    } catch (err) {
      if (!this.closed) {
        this.#state = "new";
        this.#id = newSandboxId();
      }
      throw err;
    }
    if (this.closed) {
      // close() came while the sandbox was being made: it must not live on.
      try {
        await this.client.deleteSandbox(this.#id);
      } finally {
        this.lease.release();
      }
      throw new SandboxError(`sandbox ${this.#id} was closed while it initialized; it was deleted`, "NOT_INITIALIZED");
    }
    this.sandbox = sb;
    this.#state = "running";
  }

  async #create(): Promise<Sandbox> {
    const { client, lease } = this;
    const options = this.#options;
    const signal = options.signal;
    signal?.throwIfAborted();
    const body: CreateSandboxRequest = { id: this.#id, owner: lease.owner };
    if (options.provider !== undefined) body.provider = options.provider;
    if (options.ttlSeconds !== undefined) body.ttl_seconds = options.ttlSeconds;
    if (options.env !== undefined) body.env = options.env;
    if (options.labels !== undefined) body.labels = options.labels;
    if (options.params !== undefined) body.params = options.params;
    if (options.setup !== undefined) body.setup = options.setup;
    let sent = false;
    let held = false;
    try {
      sent = true;
      await client.createSandbox(body, { signal });
      await lease.acquire(signal);
      held = true;
      const ready = await client.waitSandbox(this.#id, { timeoutMs: options.readyTimeoutMs, signal });
      if (ready.state !== "ready") throw notReady(ready);
      for (const [path, content] of Object.entries(options.initialFiles ?? {})) {
        const data = typeof content === "string" ? new TextEncoder().encode(content) : content;
        try {
          await client.writeFile(this.#id, path, data, { signal });
        } catch (err) {
          throw new SandboxError(`sandbox ${this.#id}: initial file ${path}: ${String(err)}`, "FILE_OPERATION_FAILED", err instanceof Error ? err : undefined);
        }
      }
      return ready;
    } catch (err) {
      // Whatever we requested must not outlive the failure. The create is
      // idempotent on the id: replaying it makes sure the sandbox exists
      // (its answer may have been lost), then it is ended.
      if (sent) {
        try {
          await client.createSandbox(body);
          await client.deleteSandbox(this.#id);
        } catch {
          // the owner lease ends it
        }
      }
      if (held) lease.release();
      throw err;
    }
  }

  /**
   * Reattaches to an existing sandbox, adopting it for this process's owner
   * (owner transfer), so it lives as long as this process's lease.
   */
  static async connect(id: string, options: TetherSandboxOptions & { signal?: AbortSignal | undefined; readyTimeoutMs?: number | undefined } = {}): Promise<TetherSandbox> {
    const attached = new TetherSandbox(options);
    const { client, lease } = attached;
    await client.transferOwner(id, lease.owner, { signal: options.signal });
    await lease.acquire(options.signal);
    try {
      const sb = await client.waitSandbox(id, { timeoutMs: options.readyTimeoutMs, signal: options.signal });
      if (sb.state !== "ready") throw notReady(sb);
      attached.#id = id;
      attached.sandbox = sb;
      attached.#state = "running";
      return attached;
    } catch (err) {
      lease.release();
      throw err;
    }
  }

  #ensureRunning(): void {
    if (this.#state === "new" || this.#state === "initializing") {
      throw new SandboxError(`sandbox ${this.#id} is not initialized: call initialize() first`, "NOT_INITIALIZED");
    }
  }

  /**
   * Runs command with sh -c. timeout (seconds) follows deepagents:
   * undefined → the default timeout, 0 → no limit (the server's maximum).
   * A timed-out command has exit code 124 and a note in its output.
   */
  async execute(command: string, options: ExecuteOptions = {}): Promise<ExecuteResponse> {
    this.#ensureRunning();
    const timeout = options.timeout !== undefined ? options.timeout : this.defaultTimeout;
    const req: { command: string; timeout_seconds?: number } = { command };
    if (timeout !== undefined) {
      if (!Number.isFinite(timeout) || timeout < 0) throw new RangeError(`timeout must be a non-negative number of seconds, not ${timeout}`);
      req.timeout_seconds = Math.ceil(timeout);
    }
    const res = await this.client.exec(this.#id, req, { signal: options.signal });
    let output = res.output;
    if (res.timed_out) output += `${output && !output.endsWith("\n") ? "\n" : ""}Error: Command timed out after ${res.timeout_seconds} seconds.`;
    return { output, exitCode: res.exit_code, truncated: res.truncated };
  }

  /** Writes each file; failures come back as deepagents' error literals. */
  async uploadFiles(files: Array<[string, Uint8Array]>): Promise<FileUploadResponse[]> {
    this.#ensureRunning();
    const out: FileUploadResponse[] = [];
    for (const [path, content] of files) {
      try {
        await this.client.writeFile(this.#id, path, content);
        out.push({ path, error: null });
      } catch (err) {
        const error = fileError(err);
        if (error === undefined) throw err;
        out.push({ path, error });
      }
    }
    return out;
  }

  /** Reads each file; failures come back as deepagents' error literals. */
  async downloadFiles(paths: string[]): Promise<FileDownloadResponse[]> {
    this.#ensureRunning();
    const out: FileDownloadResponse[] = [];
    for (const path of paths) {
      try {
        out.push({ path, content: await this.client.readFile(this.#id, path), error: null });
      } catch (err) {
        const error = fileError(err);
        if (error === undefined) throw err;
        out.push({ path, content: null, error });
      }
    }
    return out;
  }

  /** Whether close() was called. */
  get closed(): boolean {
    return this.#state === "closed";
  }

  /**
   * Deletes the sandbox and lets go of the owner lease (idempotent); an
   * uninitialized one is only marked closed.
   */
  async close(options: { signal?: AbortSignal | undefined } = {}): Promise<void> {
    const was = this.#state;
    if (was === "closed") return;
    this.#state = "closed";
    if (was !== "running") return;
    try {
      this.sandbox = await this.client.deleteSandbox(this.#id, options);
    } finally {
      this.lease.release();
    }
  }

  /** For `await using`. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

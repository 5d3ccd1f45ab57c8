import { posix } from "node:path";
import {
  BaseSandbox,
  SandboxError,
  type SandboxErrorCode,
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

/**
 * Seconds an execute() without a timeout may run, unless the sandbox's
 * defaultTimeout or env TETHER_EXEC_TIMEOUT says otherwise: 30 minutes, as
 * deepagents' LangSmith sandbox and Tether's Python client.
 */
export const DEFAULT_EXEC_TIMEOUT = 1800;

/**
 * The codes of a TetherSandboxError: deepagents' standard ones
 * (NOT_INITIALIZED, ALREADY_INITIALIZED, COMMAND_TIMEOUT, COMMAND_FAILED,
 * FILE_OPERATION_FAILED), and those its other providers add for the
 * sandbox itself.
 */
export type TetherSandboxErrorCode =
  | SandboxErrorCode
  /** The API key was refused (Tether's UNAUTHENTICATED or FORBIDDEN). */
  | "AUTHENTICATION_FAILED"
  /** The create failed: refused, the sandbox failed or was not ready in time. */
  | "SANDBOX_CREATION_FAILED"
  /** The sandbox does not exist, or has ended. */
  | "SANDBOX_NOT_FOUND"
  /** Tether could not be reached, or failed to answer. */
  | "UNAVAILABLE";

const TETHER_SANDBOX_ERROR = Symbol.for("tether.sandbox.error");

/**
 * The error TetherSandbox throws: a deepagents SandboxError (isInstance and
 * instanceof hold), with one of its codes. When Tether answered with a
 * problem, or could not be reached, that TetherError is the cause and
 * `tether` (its code, status and the sandbox's state).
 */
export class TetherSandboxError extends SandboxError {
  [TETHER_SANDBOX_ERROR] = true as const;
  override readonly name: string = "TetherSandboxError";
  declare readonly code: TetherSandboxErrorCode;
  /** The TetherError behind this one, if any. */
  readonly tether: TetherError | undefined;

  constructor(message: string, code: TetherSandboxErrorCode, cause?: Error) {
    super(message, code, cause);
    // SandboxError's constructor sets its own prototype: put ours back.
    Object.setPrototypeOf(this, new.target.prototype);
    this.tether = cause instanceof TetherError ? cause : undefined;
  }

  /** Reports whether error is a TetherSandboxError, across copies of this package. */
  static override isInstance(error: unknown): error is TetherSandboxError {
    return typeof error === "object" && error !== null && (error as Record<symbol, unknown>)[TETHER_SANDBOX_ERROR] === true;
  }
}

/**
 * The TetherSandboxError for a failed call: a TetherError becomes one with
 * code (or AUTHENTICATION_FAILED for a refused key, when auth is set);
 * anything else (an abort's reason, a SandboxError) is returned as it is.
 */
function sandboxError(err: unknown, what: string, code: TetherSandboxErrorCode, auth = false): unknown {
  if (!(err instanceof TetherError)) return err;
  const refused = err.code === "UNAUTHENTICATED" || err.code === "FORBIDDEN";
  return new TetherSandboxError(`${what}: ${err.message}`, auth && refused ? "AUTHENTICATION_FAILED" : code, err);
}

/** The code of a failed call about the sandbox itself (connect, close). */
function sandboxCode(err: unknown): TetherSandboxErrorCode {
  const gone = err instanceof TetherError && ["NOT_FOUND", "SANDBOX_STATE_CONFLICT", "INVALID_REQUEST"].includes(err.code);
  return gone ? "SANDBOX_NOT_FOUND" : "UNAVAILABLE";
}

/**
 * The absolute path that path names for a shell whose working directory is
 * workDir: a relative path is taken from workDir (a/b is workDir/a/b, and
 * . and .. are resolved, never above /), a trailing slash kept; an absolute
 * path, or "", is left as it is (Tether judges it).
 */
export function resolveSandboxPath(workDir: string, path: string): string {
  if (path === "" || path.startsWith("/")) return path;
  const resolved = posix.resolve(workDir, path);
  return path.endsWith("/") && !resolved.endsWith("/") ? `${resolved}/` : resolved;
}

function envExecTimeout(): number | undefined {
  const raw = process.env["TETHER_EXEC_TIMEOUT"]?.trim();
  return raw ? Number(raw) : undefined;
}

export interface TetherSandboxOptions extends TetherClientOptions {
  /** The client to use; default: one made from baseUrl/apiKey (or env). */
  client?: TetherClient | undefined;
  /** The owner lease the sandbox is bound to; default: the process's (processOwner). */
  lease?: OwnerLease | undefined;
  /**
   * Default command timeout in seconds, used when execute() is given none;
   * 0 means no limit of ours (the server's maximum). Default: env
   * TETHER_EXEC_TIMEOUT, else DEFAULT_EXEC_TIMEOUT (1800, 30 minutes).
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
   * timeout (defaultTimeout, 30 minutes unless set), 0 means no limit of
   * ours (the server's maximum), as in deepagents' sandboxes.
   */
  timeout?: number | undefined;
  /** Aborting ends the command. */
  signal?: AbortSignal | undefined;
}

/** The error for a sandbox that settled in another state than ready. */
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
 * from a successful initialize until `close()`; before and after, execute,
 * uploadFiles and downloadFiles throw TetherSandboxError NOT_INITIALIZED
 * without a request. Every failure is a TetherSandboxError (a deepagents
 * SandboxError), except an abort, which rejects with the signal's reason.
 */
export class TetherSandbox extends BaseSandbox {
  #id: string;
  readonly client: TetherClient;
  /** The owner lease the sandbox lives by: the process's (one per Tether and API key) unless given. */
  readonly lease: OwnerLease;
  /** Seconds an execute() without a timeout may run (0: the server's maximum). */
  readonly defaultTimeout: number;
  /** The sandbox as Tether last reported it; null before initialize(). */
  sandbox: Sandbox | null = null;
  readonly #options: TetherSandboxCreateOptions;
  #state: "new" | "initializing" | "running" | "closed" = "new";
  /** While initialize() runs: aborting it stops the create (close() does). */
  #closing: AbortController | undefined;
  /** While initialize() runs: settles once it has (and has cleaned up). */
  #initializing: Promise<void> | undefined;

  /**
   * An uninitialized sandbox: nothing is requested until initialize().
   * Options as for TetherSandbox.create.
   */
  constructor(options: TetherSandboxCreateOptions = {}) {
    super();
    this.client = options.client ?? new TetherClient(options);
    this.lease = options.lease ?? processOwner(this.client);
    const timeout = options.defaultTimeout ?? envExecTimeout() ?? DEFAULT_EXEC_TIMEOUT;
    if (!Number.isFinite(timeout) || timeout < 0) throw new RangeError(`defaultTimeout must be a non-negative number of seconds, not ${timeout}`);
    this.defaultTimeout = timeout;
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
      throw new TetherSandboxError(`sandbox ${this.#id} is already initialized (${this.#state})`, "ALREADY_INITIALIZED");
    }
    this.#state = "initializing";
    const closing = new AbortController();
    this.#closing = closing;
    const run = this.#initialize(closing.signal);
    this.#initializing = run.then(
      () => undefined,
      () => undefined,
    );
    try {
      await run;
    } finally {
      this.#closing = undefined;
      this.#initializing = undefined;
    }
  }

  async #initialize(closing: AbortSignal): Promise<void> {
    let sb: Sandbox;
    try {
      sb = await this.#create(closing);
    } catch (err) {
      if (closing.aborted) {
        throw new TetherSandboxError(`sandbox ${this.#id} was closed while it initialized; it was deleted`, "NOT_INITIALIZED", err instanceof Error ? err : undefined);
      }
      const id = this.#id;
      this.#state = "new";
      this.#id = newSandboxId();
      throw sandboxError(err, `sandbox ${id} was not created`, "SANDBOX_CREATION_FAILED", true);
    }
    if (closing.aborted) {
      // close() came just as the create finished: the sandbox must not live on.
      try {
        await this.client.deleteSandbox(this.#id);
      } finally {
        this.lease.release();
      }
      throw new TetherSandboxError(`sandbox ${this.#id} was closed while it initialized; it was deleted`, "NOT_INITIALIZED");
    }
    this.sandbox = sb;
    this.#state = "running";
  }

  async #create(closing: AbortSignal): Promise<Sandbox> {
    const { client, lease } = this;
    const options = this.#options;
    // Aborted by the caller's signal, or by close() while this runs.
    const signal = options.signal ? AbortSignal.any([options.signal, closing]) : closing;
    signal.throwIfAborted();
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
      try {
        await client.createSandbox(body, { signal });
      } catch (err) {
        // The server answered with a refusal (400, 403, 409, 429): it made nothing.
        if (err instanceof TetherError && err.status >= 400 && err.status < 500) sent = false;
        throw err;
      }
      await lease.acquire(signal);
      held = true;
      const ready = await client.waitSandbox(this.#id, { timeoutMs: options.readyTimeoutMs, signal });
      if (ready.state !== "ready") throw notReady(ready);
      const workDir = ready.work_dir ?? "/workspace";
      for (const [path, content] of Object.entries(options.initialFiles ?? {})) {
        const data = typeof content === "string" ? new TextEncoder().encode(content) : content;
        try {
          await client.writeFile(this.#id, resolveSandboxPath(workDir, path), data, { signal });
        } catch (err) {
          if (signal.aborted) throw err;
          throw new TetherSandboxError(`sandbox ${this.#id}: initial file ${path}: ${String(err)}`, "FILE_OPERATION_FAILED", err instanceof Error ? err : undefined);
        }
      }
      return ready;
    } catch (err) {
      // Whatever we requested must not outlive the failure: delete it, and
      // if the server has not heard of it (the create's answer was lost, or
      // it is still in flight) replay the create, idempotent on the id, so
      // that it exists, then delete it.
      if (sent) {
        try {
          try {
            await client.deleteSandbox(this.#id);
          } catch (e) {
            if (!(e instanceof TetherError && e.code === "NOT_FOUND")) throw e;
            await client.createSandbox(body);
            await client.deleteSandbox(this.#id);
          }
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
   * (owner transfer), so it lives as long as this process's lease. A
   * sandbox that does not exist or has ended is a TetherSandboxError
   * SANDBOX_NOT_FOUND.
   */
  static async connect(id: string, options: TetherSandboxOptions & { signal?: AbortSignal | undefined; readyTimeoutMs?: number | undefined } = {}): Promise<TetherSandbox> {
    const attached = new TetherSandbox(options);
    const { client, lease } = attached;
    try {
      await client.transferOwner(id, lease.owner, { signal: options.signal });
    } catch (err) {
      throw sandboxError(err, `sandbox ${id} cannot be attached`, sandboxCode(err), true);
    }
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
      throw sandboxError(err, `sandbox ${id} cannot be attached`, sandboxCode(err), true);
    }
  }

  /**
   * The absolute path path names in the sandbox, as a shell in its working
   * directory would open it: relative paths are taken from workDir
   * (/workspace: a/b is /workspace/a/b; . and .. are resolved); absolute
   * ones are left as they are. uploadFiles and downloadFiles (so every
   * file tool of deepagents) and initialFiles take paths this way.
   */
  resolvePath(path: string): string {
    return resolveSandboxPath(this.workDir ?? "/workspace", path);
  }

  /** Throws NOT_INITIALIZED, without a request, unless the sandbox is running. */
  #ensureRunning(): void {
    if (this.#state === "running") return;
    const why = this.#state === "closed" ? "is closed" : "is not initialized: call initialize() first";
    throw new TetherSandboxError(`sandbox ${this.#id} ${why}`, "NOT_INITIALIZED");
  }

  /**
   * Runs command with sh -c in the working directory. timeout (seconds)
   * follows deepagents: undefined → defaultTimeout (30 minutes unless set),
   * 0 → no limit of ours (the server's maximum). A timed-out command has
   * exit code 124 and a note in its output. A failed request is a
   * TetherSandboxError COMMAND_FAILED (NOT_INITIALIZED before initialize()
   * and after close(), without a request).
   */
  async execute(command: string, options: ExecuteOptions = {}): Promise<ExecuteResponse> {
    this.#ensureRunning();
    const timeout = options.timeout !== undefined ? options.timeout : this.defaultTimeout;
    const req: { command: string; timeout_seconds?: number } = { command };
    if (timeout !== undefined) {
      if (!Number.isFinite(timeout) || timeout < 0) throw new RangeError(`timeout must be a non-negative number of seconds, not ${timeout}`);
      req.timeout_seconds = Math.ceil(timeout);
    }
    let res: Awaited<ReturnType<TetherClient["exec"]>>;
    try {
      res = await this.client.exec(this.#id, req, { signal: options.signal });
    } catch (err) {
      throw sandboxError(err, `sandbox ${this.#id}: execute`, "COMMAND_FAILED");
    }
    let output = res.output;
    if (res.timed_out) output += `${output && !output.endsWith("\n") ? "\n" : ""}Error: Command timed out after ${res.timeout_seconds} seconds.`;
    return { output, exitCode: res.exit_code, truncated: res.truncated };
  }

  /**
   * Writes each file (a relative path is taken from the working directory,
   * see resolvePath); a file's failure comes back as deepagents' error
   * literal, any other (the sandbox ended, Tether unreachable) is a
   * TetherSandboxError FILE_OPERATION_FAILED.
   */
  async uploadFiles(files: Array<[string, Uint8Array]>): Promise<FileUploadResponse[]> {
    this.#ensureRunning();
    const out: FileUploadResponse[] = [];
    for (const [path, content] of files) {
      try {
        await this.client.writeFile(this.#id, this.resolvePath(path), content);
        out.push({ path, error: null });
      } catch (err) {
        const error = fileError(err);
        if (error === undefined) throw sandboxError(err, `sandbox ${this.#id}: upload ${path}`, "FILE_OPERATION_FAILED");
        out.push({ path, error });
      }
    }
    return out;
  }

  /** Reads each file; paths and failures as in uploadFiles. */
  async downloadFiles(paths: string[]): Promise<FileDownloadResponse[]> {
    this.#ensureRunning();
    const out: FileDownloadResponse[] = [];
    for (const path of paths) {
      try {
        out.push({ path, content: await this.client.readFile(this.#id, this.resolvePath(path)), error: null });
      } catch (err) {
        const error = fileError(err);
        if (error === undefined) throw sandboxError(err, `sandbox ${this.#id}: download ${path}`, "FILE_OPERATION_FAILED");
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
   * uninitialized one is only marked closed. During initialize() it aborts
   * the create and returns once the sandbox it requested is deleted. A
   * delete that fails is a TetherSandboxError (the sandbox is closed all
   * the same, and the owner lease ends it).
   */
  async close(options: { signal?: AbortSignal | undefined } = {}): Promise<void> {
    const was = this.#state;
    if (was === "closed") return;
    this.#state = "closed";
    if (was === "initializing") {
      this.#closing?.abort(new TetherSandboxError(`sandbox ${this.#id} was closed while it initialized`, "NOT_INITIALIZED"));
      await this.#initializing;
      return;
    }
    if (was !== "running") return;
    try {
      this.sandbox = await this.client.deleteSandbox(this.#id, options);
    } catch (err) {
      throw sandboxError(err, `sandbox ${this.#id}: close`, sandboxCode(err), true);
    } finally {
      this.lease.release();
    }
  }

  /** For `await using`. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

import { hostname } from "node:os";
import { createHash, randomBytes } from "node:crypto";
import { clientScope, type TetherClient } from "./client.js";
import { TetherError } from "./errors.js";

/** The default owner lease, in seconds; heartbeats go every third of it. */
export const DEFAULT_OWNER_TTL = 30;

/** A name unique to this process: host-pid-random. */
export function defaultOwnerName(): string {
  const host = hostname().replace(/[^A-Za-z0-9._-]/g, "-").slice(0, 40) || "host";
  return `${host}-${process.pid}-${randomBytes(4).toString("hex")}`;
}

export interface OwnerLeaseOptions {
  /** The owner name; default: defaultOwnerName(). */
  owner?: string | undefined;
  /** The lease in seconds (at least 1); default: env TETHER_OWNER_TTL or 30. */
  ttlSeconds?: number | undefined;
  /** Called with a heartbeat's error (it is retried at the next beat). */
  onError?: ((err: unknown) => void) | undefined;
}

/**
 * An owner lease heartbeated while the process holds sandboxes: every
 * sandbox the process creates or adopts names this owner, so that when the
 * process dies (even with SIGKILL) its sandboxes end within the lease plus
 * one janitor interval. The heartbeat's timer is unref'd: it never keeps
 * the process alive, and it stops when the last sandbox is let go.
 */
export class OwnerLease {
  readonly owner: string;
  readonly ttlSeconds: number;
  readonly #client: TetherClient;
  readonly #onError: ((err: unknown) => void) | undefined;
  #holds = 0;
  #timer: NodeJS.Timeout | undefined;
  #beating: Promise<void> | undefined;

  constructor(client: TetherClient, options: OwnerLeaseOptions = {}) {
    this.#client = client;
    this.owner = options.owner ?? defaultOwnerName();
    const envTtl = process.env["TETHER_OWNER_TTL"];
    const ttl = options.ttlSeconds ?? (envTtl ? Number(envTtl) : DEFAULT_OWNER_TTL);
    if (!Number.isFinite(ttl) || ttl < 1) throw new RangeError("an owner lease lasts at least 1 second");
    this.ttlSeconds = Math.floor(ttl);
    this.#onError = options.onError;
  }

  /** How many sandboxes hold the lease. */
  get holds(): number {
    return this.#holds;
  }

  /** Reports whether the heartbeat runs. */
  get beating(): boolean {
    return this.#timer !== undefined;
  }

  /**
   * Takes a hold for one sandbox (already created naming this owner): renews
   * the lease now, with this lease's TTL, and starts the heartbeat if needed.
   */
  async acquire(signal?: AbortSignal): Promise<void> {
    this.#holds++;
    try {
      await this.#client.putOwnerLease(this.owner, this.ttlSeconds, { signal });
    } catch (err) {
      if (!(err instanceof TetherError)) {
        this.release();
        throw err;
      }
      this.#onError?.(err);
    }
    if (this.#holds > 0 && this.#timer === undefined) {
      this.#timer = setInterval(() => this.#beat(), Math.max(250, (this.ttlSeconds * 1000) / 3));
      this.#timer.unref();
    }
  }

  /** Lets one hold go; the heartbeat stops with the last. */
  release(): void {
    if (this.#holds > 0) this.#holds--;
    if (this.#holds === 0) this.stop();
  }

  /** Stops the heartbeat now (the lease then lapses by itself). */
  stop(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** Stops the heartbeat and ends the owner, which ends all its sandboxes. */
  async end(signal?: AbortSignal): Promise<void> {
    this.#holds = 0;
    this.stop();
    await this.#beating;
    await this.#client.releaseOwner(this.owner, { signal });
  }

  #beat(): void {
    if (this.#beating) return;
    const timeout = AbortSignal.timeout(Math.max(1000, (this.ttlSeconds * 1000) / 2));
    this.#beating = this.#client
      .putOwnerLease(this.owner, this.ttlSeconds, { signal: timeout })
      .then(() => undefined, (err: unknown) => this.#onError?.(err))
      .finally(() => { this.#beating = undefined; });
  }
}

/** The process's owner leases, one per Tether and API key (a SHA-256 of both). */
const shared = new Map<string, OwnerLease>();

/**
 * The process's owner lease for the Tether and API key client speaks to,
 * made on first use (with options; later calls' options are ignored).
 * Every client of the same Tether and key gets the same lease, so a
 * process has one owner and one heartbeat however many clients and
 * sandboxes it makes.
 */
export function processOwner(client: TetherClient, options?: OwnerLeaseOptions): OwnerLease {
  const scope = createHash("sha256").update(clientScope(client)).digest("hex");
  let lease = shared.get(scope);
  if (!lease) {
    lease = new OwnerLease(client, options);
    shared.set(scope, lease);
  }
  return lease;
}

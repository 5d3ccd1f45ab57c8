import createClient, { type Client } from "openapi-fetch";
import type { components, paths } from "./schema.js";
import { TetherError, errorFromResponse, isProblem, networkError } from "./errors.js";
import { Terminal, type WebSocketConstructor, type WebSocketLike } from "./terminal.js";

type Schemas = components["schemas"];
export type Sandbox = Schemas["Sandbox"];
export type SandboxList = Schemas["SandboxList"];
export type SandboxReason = Schemas["SandboxReason"];
export type CreateSandboxRequest = Schemas["CreateSandboxRequest"];
export type ExecRequest = Schemas["ExecRequest"];
export type ExecResult = Schemas["ExecResult"];
export type Event = Schemas["Event"];
export type EventList = Schemas["EventList"];
export type OwnerLease = Schemas["OwnerLease"];
export type OwnerRelease = Schemas["OwnerRelease"];
export type Provider = Schemas["Provider"];
export type ProviderList = Schemas["ProviderList"];
export type Health = Schemas["Health"];
export type ListSandboxesQuery = NonNullable<paths["/v1/sandboxes"]["get"]["parameters"]["query"]>;
export type ListEventsQuery = NonNullable<paths["/v1/events"]["get"]["parameters"]["query"]>;
export type ListSandboxEventsQuery = NonNullable<paths["/v1/sandboxes/{id}/events"]["get"]["parameters"]["query"]>;
export type Webhook = Schemas["Webhook"];
export type WebhookList = Schemas["WebhookList"];
export type CreateWebhookRequest = Schemas["CreateWebhookRequest"];
export type CreatedWebhook = Schemas["CreatedWebhook"];
export type WebhookDelivery = Schemas["WebhookDelivery"];
export type WebhookDeliveryList = Schemas["WebhookDeliveryList"];
export type ReplayWebhookRequest = Schemas["ReplayWebhookRequest"];
export type Preview = Schemas["Preview"];
export type PreviewList = Schemas["PreviewList"];
export type PreviewRequest = Schemas["PreviewRequest"];
export type SandboxNetwork = Schemas["SandboxNetwork"];
export type UpdateNetworkRequest = Schemas["UpdateNetworkRequest"];
export type NetworkCredential = Schemas["NetworkCredential"];
export type NetworkPolicy = Schemas["NetworkPolicy"];
export type NetworkPolicyList = Schemas["NetworkPolicyList"];
export type PutNetworkPolicyRequest = Schemas["PutNetworkPolicyRequest"];
export type Secret = Schemas["Secret"];
export type SecretList = Schemas["SecretList"];
export type Snapshot = Schemas["Snapshot"];
export type SnapshotList = Schemas["SnapshotList"];
export type ListSnapshotsQuery = NonNullable<paths["/v1/snapshots"]["get"]["parameters"]["query"]>;
export type ListWebhookDeliveriesQuery = NonNullable<paths["/v1/webhooks/{id}/deliveries"]["get"]["parameters"]["query"]>;
export type Process = Schemas["Process"];
export type ProcessList = Schemas["ProcessList"];
export type ProcessExit = Schemas["ProcessExit"];
export type StartProcessRequest = Schemas["StartProcessRequest"];
export type TerminalSize = Schemas["TerminalSize"];
export type FileChange = Schemas["FileChange"];

/** A process, by its pid (a number, or its digits) or by its tag. */
export type ProcessRef = number | string;

/** One event of a process's output (processOutput). */
export type ProcessOutputEvent =
  /** First: the process followed. */
  | { type: "start"; pid: number }
  /**
   * A chunk of its output (pty: a terminal's screen bytes) as text, and
   * where it starts in all of its output; with encoding "base64", data is
   * "" and bytes holds the chunk exactly as written.
   */
  | { type: "stdout" | "stderr" | "pty"; data: string; offset: number; bytes?: Uint8Array }
  /** Output that fell out of the kept window before this client read it, just before offset. */
  | { type: "dropped"; bytes: number; offset: number }
  /** Last: how it ended. */
  | { type: "exit"; exit: ProcessExit };

/** One event of a watch (watch): start first, once armed; then one per change, named by its kind. */
export type WatchEvent =
  | { type: "start"; path: string; recursive: boolean }
  | ({ type: FileChange["kind"] } & FileChange);

export interface ProcessOutputOptions extends CallOptions {
  /** now (the default): only what comes next; start: from the start of what the sandbox keeps. */
  from?: "now" | "start" | undefined;
  /** text (the default), or base64: each chunk's bytes exactly as written (event.bytes). */
  encoding?: "text" | "base64" | undefined;
}

export interface WaitProcessOptions extends CallOptions {
  /** How long to wait in all, in milliseconds (default 120 000). */
  timeoutMs?: number | undefined;
}

export interface TerminalOptions extends CallOptions {
  /** start (the default): the screen drawn again from what is kept; now: only what comes next. */
  from?: "start" | "now" | undefined;
  /**
   * The WebSocket class to use. By default the global WebSocket (browsers,
   * Node 22; Node 20 only with --experimental-websocket), else the ws
   * package's (an optional peer dependency: npm install ws).
   */
  WebSocket?: WebSocketConstructor | undefined;
}

/** Options every call takes. */
export interface CallOptions {
  /** Aborts the call; it then rejects with the signal's reason. */
  signal?: AbortSignal | undefined;
}

export interface CreateOptions extends CallOptions {
  /** Repeating a create with the same key returns the same sandbox. */
  idempotencyKey?: string | undefined;
}

export interface WaitOptions extends CallOptions {
  /** How long to wait in all, in milliseconds (default 120 000). */
  timeoutMs?: number | undefined;
  /** settled (default): no longer requested or creating; released: resources confirmed gone. */
  until?: "settled" | "released" | undefined;
}

/** One event of a streaming exec. */
export type ExecStreamEvent =
  | { type: "stdout"; data: string }
  | { type: "stderr"; data: string }
  | { type: "exit"; result: ExecResult };

export interface TetherClientOptions {
  /** Tether's base URL; default: env TETHER_URL. */
  baseUrl?: string | undefined;
  /** The API key; default: env TETHER_API_KEY. */
  apiKey?: string | undefined;
  /** The fetch to use (default: the global fetch). */
  fetch?: typeof fetch | undefined;
}

const liveStates: ReadonlySet<string> = new Set(["requested", "creating", "pausing", "resuming"]);

const ID_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz";

/**
 * A fresh sandbox id, made as the server makes them: "sbx_" and 26 base32
 * characters of 128 bits, the time in milliseconds (48) then 80 random
 * bits. A create that carries it (CreateSandboxRequest.id) is idempotent on
 * it, so the id is known before the request is sent.
 */
export function newSandboxId(): string {
  const random = crypto.getRandomValues(new Uint8Array(10));
  let n = BigInt(Date.now()) & ((1n << 48n) - 1n);
  for (const b of random) n = (n << 8n) | BigInt(b);
  n <<= 2n; // 130 bits, as base32 pads the last character
  let out = "";
  for (let i = 0; i < 26; i++) {
    out = ID_ALPHABET[Number(n & 31n)] + out;
    n >>= 5n;
  }
  return `sbx_${out}`;
}

/** Reports whether a sandbox is not settled yet: still being created (requested or creating), or pausing or resuming. */
export function isSettling(sb: Sandbox): boolean {
  return liveStates.has(sb.state);
}

/**
 * Each client's scope, the Tether and the key it speaks to: clients of one
 * scope share the process's owner lease (processOwner).
 */
const scopes = new WeakMap<TetherClient, string>();

/** The scope of a client: its base URL and API key (for processOwner; not exported by the package). */
export function clientScope(client: TetherClient): string {
  return scopes.get(client) ?? client.baseUrl;
}

/** A process's pid or tag, as the path's {pid}. */
function processId(pid: ProcessRef): string {
  if (typeof pid === "number") {
    if (!Number.isInteger(pid) || pid <= 0) throw new RangeError(`a pid is a positive integer, got ${pid}`);
    return String(pid);
  }
  if (pid === "") throw new RangeError("a process is its pid or its tag, got an empty string");
  return pid;
}

/** The path of a sandbox's process, and what follows it. */
function processPath(id: string, pid: ProcessRef, suffix: string): string {
  return `/v1/sandboxes/${encodeURIComponent(id)}/processes/${encodeURIComponent(processId(pid))}${suffix}`;
}

/** The bytes of base64 text (atob: browsers and Node alike). */
function fromBase64(b64: string): Uint8Array {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** The constructor of the ws package, when it is installed (an optional peer dependency). */
async function wsPackage(): Promise<WsConstructor | undefined> {
  const name = "ws"; // not a literal import: the package is optional, and its types too
  try {
    const mod = (await import(name)) as { WebSocket?: WsConstructor; default?: WsConstructor };
    return mod.WebSocket ?? mod.default;
  } catch {
    return undefined;
  }
}

/** The ws package's constructor: the WHATWG one's, and options with headers. */
type WsConstructor = new (url: string, protocols: string[], options: { headers: Record<string, string> }) => WebSocketLike;

function abortReason(signal: AbortSignal | undefined): unknown {
  return signal?.reason ?? new DOMException("This operation was aborted", "AbortError");
}

/**
 * A typed client for every v1 route of Tether. Every method rejects with a
 * TetherError for a Problem, and with the signal's reason when aborted.
 */
export class TetherClient {
  readonly baseUrl: string;
  readonly #apiKey: string;
  readonly #fetch: typeof fetch;
  readonly #api: Client<paths>;

  constructor(options: TetherClientOptions = {}) {
    const baseUrl = options.baseUrl ?? process.env["TETHER_URL"];
    const apiKey = options.apiKey ?? process.env["TETHER_API_KEY"];
    if (!baseUrl) throw new TypeError("TetherClient needs a baseUrl (or env TETHER_URL)");
    if (!apiKey) throw new TypeError("TetherClient needs an apiKey (or env TETHER_API_KEY)");
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.#apiKey = apiKey;
    this.#fetch = options.fetch ?? globalThis.fetch;
    scopes.set(this, `${this.baseUrl}\n${apiKey}`);
    const f = this.#fetch;
    this.#api = createClient<paths>({
      baseUrl: this.baseUrl,
      headers: { Authorization: `Bearer ${apiKey}` },
      fetch: (req: Request) => f(req),
    });
  }

  /** Runs an openapi-fetch call, turning errors into TetherError and aborts into the signal's reason. */
  async #call<T>(signal: AbortSignal | undefined, run: () => Promise<{ data?: T; error?: unknown; response: Response }>): Promise<T> {
    signal?.throwIfAborted();
    let out: { data?: T; error?: unknown; response: Response };
    try {
      out = await run();
    } catch (err) {
      if (signal?.aborted) throw abortReason(signal);
      if (err instanceof TetherError) throw err;
      throw networkError(err);
    }
    if (!out.response.ok) throw errorFromResponse(out.response, out.error);
    return out.data as T;
  }

  /** A raw request, for binary bodies and event streams. */
  async #raw(method: string, path: string, init: { signal?: AbortSignal | undefined; body?: Uint8Array | string | undefined; headers?: Record<string, string> }): Promise<Response> {
    init.signal?.throwIfAborted();
    let res: Response;
    try {
      const req: RequestInit = {
        method,
        headers: { Authorization: `Bearer ${this.#apiKey}`, ...init.headers },
      };
      if (init.body !== undefined) req.body = typeof init.body === "string" ? init.body : (init.body as Uint8Array<ArrayBuffer>);
      if (init.signal) req.signal = init.signal;
      res = await this.#fetch(this.baseUrl + path, req);
    } catch (err) {
      if (init.signal?.aborted) throw abortReason(init.signal);
      throw networkError(err);
    }
    if (!res.ok) {
      const text = await res.text().catch(() => "");
      let body: unknown = text;
      try { body = JSON.parse(text); } catch { /* not JSON */ }
      throw errorFromResponse(res, body);
    }
    return res;
  }

  // --- health ---

  /** GET /healthz: liveness. */
  healthz(opts: CallOptions = {}): Promise<Health> {
    return this.#call(opts.signal, () => this.#api.GET("/healthz", { signal: opts.signal }));
  }

  /** GET /readyz: readiness (postgres reachable, schema current). */
  readyz(opts: CallOptions = {}): Promise<Health> {
    return this.#call(opts.signal, () => this.#api.GET("/readyz", { signal: opts.signal }));
  }

  // --- providers ---

  /** GET /v1/providers */
  listProviders(opts: CallOptions = {}): Promise<ProviderList> {
    return this.#call(opts.signal, () => this.#api.GET("/v1/providers", { signal: opts.signal }));
  }

  // --- sandboxes ---

  /** POST /v1/sandboxes: records the request; the sandbox comes back in state requested. */
  createSandbox(body: CreateSandboxRequest, opts: CreateOptions = {}): Promise<Sandbox> {
    const header = opts.idempotencyKey === undefined ? {} : { "Idempotency-Key": opts.idempotencyKey };
    return this.#call(opts.signal, () => this.#api.POST("/v1/sandboxes", { body, params: { header }, signal: opts.signal }));
  }

  /** GET /v1/sandboxes */
  listSandboxes(query: ListSandboxesQuery = {}, opts: CallOptions = {}): Promise<SandboxList> {
    return this.#call(opts.signal, () => this.#api.GET("/v1/sandboxes", { params: { query }, signal: opts.signal }));
  }

  /** GET /v1/sandboxes/{id}, optionally long-polling (wait: a Go duration such as "30s"). */
  getSandbox(id: string, opts: CallOptions & { wait?: string; until?: "settled" | "released" } = {}): Promise<Sandbox> {
    const query: { wait?: string; until?: "settled" | "released" } = {};
    if (opts.wait !== undefined) query.wait = opts.wait;
    if (opts.until !== undefined) query.until = opts.until;
    return this.#call(opts.signal, () => this.#api.GET("/v1/sandboxes/{id}", { params: { path: { id }, query }, signal: opts.signal }));
  }

  /**
   * Long-polls the sandbox until it settled (no longer requested or
   * creating, nor pausing or resuming) or, with until "released", until its resources are released;
   * returns it as it is then. Rejects with a TetherError when timeoutMs passes first.
   */
  async waitSandbox(id: string, opts: WaitOptions = {}): Promise<Sandbox> {
    const until = opts.until ?? "settled";
    const deadline = Date.now() + (opts.timeoutMs ?? 120_000);
    for (;;) {
      const left = Math.max(1, Math.ceil((deadline - Date.now()) / 1000));
      const sb = await this.getSandbox(id, { wait: `${Math.min(left, 30)}s`, until, signal: opts.signal });
      const done = until === "released" ? sb.released : !isSettling(sb);
      if (done) return sb;
      if (Date.now() >= deadline) {
        throw new TetherError({
          code: "UNAVAILABLE", status: 0, state: sb.state,
          message: `sandbox ${id} not ${until} after ${opts.timeoutMs ?? 120_000} ms (state ${sb.state})`,
        });
      }
    }
  }

  /** DELETE /v1/sandboxes/{id}: cancels or terminates it (idempotent). */
  deleteSandbox(id: string, opts: CallOptions = {}): Promise<Sandbox> {
    return this.#call(opts.signal, () => this.#api.DELETE("/v1/sandboxes/{id}", { params: { path: { id } }, signal: opts.signal }));
  }

  /** POST /v1/sandboxes/{id}/renew: the sandbox lives ttlSeconds from now. */
  renewSandbox(id: string, ttlSeconds: number, opts: CallOptions = {}): Promise<Sandbox> {
    return this.#call(opts.signal, () => this.#api.POST("/v1/sandboxes/{id}/renew", { params: { path: { id } }, body: { ttl_seconds: ttlSeconds }, signal: opts.signal }));
  }

  /**
   * POST /v1/sandboxes/{id}/pause: pauses a ready sandbox (its processes stop,
   * keeping their memory and files; exec and files on it are 409
   * SANDBOX_STATE_CONFLICT until it is resumed). With wait (a Go duration
   * such as "30s"), resolves once it is no longer pausing, or the wait ends.
   * Idempotent.
   */
  pauseSandbox(id: string, opts: CallOptions & { wait?: string } = {}): Promise<Sandbox> {
    const query = opts.wait === undefined ? {} : { wait: opts.wait };
    return this.#call(opts.signal, () => this.#api.POST("/v1/sandboxes/{id}/pause", { params: { path: { id }, query }, signal: opts.signal }));
  }

  /**
   * POST /v1/sandboxes/{id}/resume: resumes a paused sandbox, its processes,
   * memory and files as they were. With wait, resolves once it is no longer
   * resuming, or the wait ends. Idempotent.
   */
  resumeSandbox(id: string, opts: CallOptions & { wait?: string } = {}): Promise<Sandbox> {
    const query = opts.wait === undefined ? {} : { wait: opts.wait };
    return this.#call(opts.signal, () => this.#api.POST("/v1/sandboxes/{id}/resume", { params: { path: { id }, query }, signal: opts.signal }));
  }

  /** PUT /v1/sandboxes/{id}/owner: makes owner the sandbox's owner. */
  transferOwner(id: string, owner: string, opts: CallOptions = {}): Promise<Sandbox> {
    return this.#call(opts.signal, () => this.#api.PUT("/v1/sandboxes/{id}/owner", { params: { path: { id } }, body: { owner }, signal: opts.signal }));
  }

  /** GET /v1/sandboxes/{id}/events */
  listSandboxEvents(id: string, query: ListSandboxEventsQuery = {}, opts: CallOptions = {}): Promise<EventList> {
    return this.#call(opts.signal, () => this.#api.GET("/v1/sandboxes/{id}/events", { params: { path: { id }, query }, signal: opts.signal }));
  }

  /** GET /v1/events: the tenant's events. */
  listEvents(query: ListEventsQuery = {}, opts: CallOptions = {}): Promise<EventList> {
    return this.#call(opts.signal, () => this.#api.GET("/v1/events", { params: { query }, signal: opts.signal }));
  }

  // --- ports and previews (docs/ports.md) ---

  /**
   * The URL of path on port in the sandbox, through the API; send it the
   * API key (fetchPort does), or open a WebSocket on its ws:// form with an
   * Authorization header.
   */
  portUrl(id: string, port: number, path = "/"): string {
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new RangeError(`port must be an integer 1-65535, got ${port}`);
    return `${this.baseUrl}/v1/sandboxes/${encodeURIComponent(id)}/ports/${port}/${path.replace(/^\/+/, "")}`;
  }

  /**
   * fetch of path on port in the sandbox, with the API key: the app's
   * answer whatever its status. Tether's own refusals are problems
   * (application/problem+json): 502 PORT_UNREACHABLE when nothing listens.
   */
  async fetchPort(id: string, port: number, path = "/", init: RequestInit = {}): Promise<Response> {
    const headers = new Headers(init.headers);
    headers.set("Authorization", `Bearer ${this.#apiKey}`);
    try {
      return await this.#fetch(this.portUrl(id, port, path), { ...init, headers });
    } catch (err) {
      if (init.signal?.aborted) throw abortReason(init.signal);
      throw networkError(err);
    }
  }

  /** POST /v1/sandboxes/{id}/previews: a URL of the port that needs no API key; its token is shown this once. */
  createPreview(id: string, body: PreviewRequest, opts: CallOptions = {}): Promise<Preview> {
    return this.#call(opts.signal, () => this.#api.POST("/v1/sandboxes/{id}/previews", { params: { path: { id } }, body, signal: opts.signal }));
  }

  /** GET /v1/sandboxes/{id}/previews: the sandbox's previews, oldest first, without tokens. */
  listPreviews(id: string, opts: CallOptions = {}): Promise<PreviewList> {
    return this.#call(opts.signal, () => this.#api.GET("/v1/sandboxes/{id}/previews", { params: { path: { id } }, signal: opts.signal }));
  }

  /** DELETE /v1/sandboxes/{id}/previews/{preview_id}: the preview stops working at once. */
  revokePreview(id: string, previewId: string, opts: CallOptions = {}): Promise<Preview> {
    return this.#call(opts.signal, () =>
      this.#api.DELETE("/v1/sandboxes/{id}/previews/{preview_id}", { params: { path: { id, preview_id: previewId } }, signal: opts.signal }),
    );
  }

  // --- network rules, policies and secrets (docs/providers.md#network-allow-list) ---

  /** GET /v1/sandboxes/{id}/network: the sandbox's network rules; secrets by name only. */
  getNetwork(id: string, opts: CallOptions = {}): Promise<SandboxNetwork> {
    return this.#call(opts.signal, () => this.#api.GET("/v1/sandboxes/{id}/network", { params: { path: { id } }, signal: opts.signal }));
  }

  /** PATCH /v1/sandboxes/{id}/network: replaces an allow-list sandbox's allow list (and, if given, its credentials and policies); in force within a second. */
  updateNetwork(id: string, body: UpdateNetworkRequest, opts: CallOptions = {}): Promise<SandboxNetwork> {
    return this.#call(opts.signal, () => this.#api.PATCH("/v1/sandboxes/{id}/network", { params: { path: { id } }, body, signal: opts.signal }));
  }

  /** PUT /v1/network-policies/{name}: defines (or replaces) a network policy that sandboxes attach by name. */
  putNetworkPolicy(name: string, body: PutNetworkPolicyRequest, opts: CallOptions = {}): Promise<NetworkPolicy> {
    return this.#call(opts.signal, () => this.#api.PUT("/v1/network-policies/{name}", { params: { path: { name } }, body, signal: opts.signal }));
  }

  /** GET /v1/network-policies: the tenant's network policies by name. */
  listNetworkPolicies(opts: CallOptions = {}): Promise<NetworkPolicyList> {
    return this.#call(opts.signal, () => this.#api.GET("/v1/network-policies", { signal: opts.signal }));
  }

  /** GET /v1/network-policies/{name} */
  getNetworkPolicy(name: string, opts: CallOptions = {}): Promise<NetworkPolicy> {
    return this.#call(opts.signal, () => this.#api.GET("/v1/network-policies/{name}", { params: { path: { name } }, signal: opts.signal }));
  }

  /** DELETE /v1/network-policies/{name}: the sandboxes attached lose its rules. */
  async deleteNetworkPolicy(name: string, opts: CallOptions = {}): Promise<void> {
    await this.#call(opts.signal, () => this.#api.DELETE("/v1/network-policies/{name}", { params: { path: { name } }, signal: opts.signal }));
  }

  /** POST /v1/secrets: stores a secret (sealed; its value is never shown again); the same name again replaces the value. */
  putSecret(name: string, value: string, opts: CallOptions = {}): Promise<Secret> {
    return this.#call(opts.signal, () => this.#api.POST("/v1/secrets", { body: { name, value }, signal: opts.signal }));
  }

  /** GET /v1/secrets: the tenant's secrets by name, without values. */
  listSecrets(opts: CallOptions = {}): Promise<SecretList> {
    return this.#call(opts.signal, () => this.#api.GET("/v1/secrets", { signal: opts.signal }));
  }

  /** DELETE /v1/secrets/{name}: credentials naming it stop working. */
  async deleteSecret(name: string, opts: CallOptions = {}): Promise<void> {
    await this.#call(opts.signal, () => this.#api.DELETE("/v1/secrets/{name}", { params: { path: { name } }, signal: opts.signal }));
  }

  // --- snapshots (docs/snapshots.md) ---

  /** POST /v1/sandboxes/{id}/snapshots: snapshots a ready or paused sandbox's /workspace; with wait (a Go duration such as "30s"), answers once it settled. */
  createSnapshot(id: string, opts: CallOptions & { wait?: string } = {}): Promise<Snapshot> {
    const query: { wait?: string } = {};
    if (opts.wait !== undefined) query.wait = opts.wait;
    return this.#call(opts.signal, () => this.#api.POST("/v1/sandboxes/{id}/snapshots", { params: { path: { id }, query }, signal: opts.signal }));
  }

  /** GET /v1/snapshots: the tenant's snapshots, newest first; sandbox selects one sandbox's. */
  listSnapshots(query: ListSnapshotsQuery = {}, opts: CallOptions = {}): Promise<SnapshotList> {
    return this.#call(opts.signal, () => this.#api.GET("/v1/snapshots", { params: { query }, signal: opts.signal }));
  }

  /** GET /v1/snapshots/{id}, optionally waiting until it is no longer creating. */
  getSnapshot(id: string, opts: CallOptions & { wait?: string } = {}): Promise<Snapshot> {
    const query: { wait?: string } = {};
    if (opts.wait !== undefined) query.wait = opts.wait;
    return this.#call(opts.signal, () => this.#api.GET("/v1/snapshots/{id}", { params: { path: { id }, query }, signal: opts.signal }));
  }

  /** DELETE /v1/snapshots/{id} (idempotent); its data goes at the next reconciliation. */
  deleteSnapshot(id: string, opts: CallOptions = {}): Promise<Snapshot> {
    return this.#call(opts.signal, () => this.#api.DELETE("/v1/snapshots/{id}", { params: { path: { id } }, signal: opts.signal }));
  }

  // --- webhooks (docs/webhooks.md; the API key needs manage_keys) ---

  /** POST /v1/webhooks: registers an endpoint; the answer's secret is shown this once. */
  createWebhook(body: CreateWebhookRequest, opts: CallOptions = {}): Promise<CreatedWebhook> {
    return this.#call(opts.signal, () => this.#api.POST("/v1/webhooks", { body, signal: opts.signal }));
  }

  /** GET /v1/webhooks: the tenant's endpoints, oldest first. */
  listWebhooks(opts: CallOptions = {}): Promise<WebhookList> {
    return this.#call(opts.signal, () => this.#api.GET("/v1/webhooks", { signal: opts.signal }));
  }

  /** GET /v1/webhooks/{id} */
  getWebhook(id: string, opts: CallOptions = {}): Promise<Webhook> {
    return this.#call(opts.signal, () => this.#api.GET("/v1/webhooks/{id}", { params: { path: { id } }, signal: opts.signal }));
  }

  /** DELETE /v1/webhooks/{id}: deletes the endpoint and its history. */
  deleteWebhook(id: string, opts: CallOptions = {}): Promise<Webhook> {
    return this.#call(opts.signal, () => this.#api.DELETE("/v1/webhooks/{id}", { params: { path: { id } }, signal: opts.signal }));
  }

  /** GET /v1/webhooks/{id}/deliveries: the endpoint's deliveries, newest first. */
  listWebhookDeliveries(id: string, query: ListWebhookDeliveriesQuery = {}, opts: CallOptions = {}): Promise<WebhookDeliveryList> {
    return this.#call(opts.signal, () => this.#api.GET("/v1/webhooks/{id}/deliveries", { params: { path: { id }, query }, signal: opts.signal }));
  }

  /** POST /v1/webhooks/{id}/replay: re-enables the endpoint and delivers again from an event, a delivery, or (`{}`) where it stopped. */
  replayWebhook(id: string, body: ReplayWebhookRequest = {}, opts: CallOptions = {}): Promise<Webhook> {
    return this.#call(opts.signal, () => this.#api.POST("/v1/webhooks/{id}/replay", { params: { path: { id } }, body, signal: opts.signal }));
  }

  // --- exec ---

  /** POST /v1/sandboxes/{id}/exec: runs the command and returns its combined output. */
  exec(id: string, body: ExecRequest, opts: CallOptions = {}): Promise<ExecResult> {
    return this.#call(opts.signal, async () => {
      const r = await this.#api.POST("/v1/sandboxes/{id}/exec", { params: { path: { id } }, body, signal: opts.signal });
      // JSON was asked for (the default Accept); the schema's text/event-stream alternative is execStream's.
      return { data: r.data as ExecResult | undefined, error: r.error, response: r.response };
    });
  }

  /**
   * POST /v1/sandboxes/{id}/exec with Accept: text/event-stream: yields
   * stdout and stderr chunks as they come, then one exit event. An error
   * event rejects with its TetherError; aborting ends the command.
   */
  async *execStream(id: string, body: ExecRequest, opts: CallOptions = {}): AsyncGenerator<ExecStreamEvent, void, undefined> {
    const res = await this.#raw("POST", `/v1/sandboxes/${encodeURIComponent(id)}/exec`, {
      signal: opts.signal,
      body: JSON.stringify(body),
      headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
    });
    for await (const { event, data } of this.#sse(res, "exec stream", "an exit event", opts.signal)) {
      switch (event) {
        case "stdout":
        case "stderr":
          yield { type: event, data: typeof data["data"] === "string" ? data["data"] : "" };
          break;
        case "exit":
          yield { type: "exit", result: data as unknown as ExecResult };
          return;
      }
    }
  }

  /**
   * The events of a Server-Sent Events answer, their data parsed as JSON
   * objects. An error event rejects with its TetherError; aborting, with
   * the signal's reason; the answer's end, with UNAVAILABLE ("what ended
   * without end"): the caller leaves the loop at its stream's last event.
   * Leaving the loop cancels the answer's body.
   */
  async *#sse(res: Response, what: string, end: string, signal: AbortSignal | undefined): AsyncGenerator<{ event: string; data: Record<string, unknown> }, void, undefined> {
    if (!res.body) throw new TetherError({ code: "INTERNAL", status: res.status, message: `${what} without a body` });
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    try {
      for (;;) {
        let chunk: ReadableStreamReadResult<string>;
        try {
          chunk = await reader.read();
        } catch (err) {
          if (signal?.aborted) throw abortReason(signal);
          throw networkError(err);
        }
        if (chunk.done) throw new TetherError({ code: "UNAVAILABLE", status: 0, message: `${what} ended without ${end}` });
        buf += chunk.value.replace(/\r\n?/g, "\n");
        let idx: number;
        while ((idx = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, idx);
          buf = buf.slice(idx + 2);
          const ev = parseSSE(block);
          if (!ev) continue;
          let data: unknown;
          try {
            data = JSON.parse(ev.data);
          } catch {
            throw new TetherError({ code: "INTERNAL", status: res.status, message: `${what}: bad ${ev.event} event data: ${ev.data.slice(0, 200)}` });
          }
          if (ev.event === "error") {
            if (isProblem(data)) throw TetherError.fromProblem(data, res.headers.get("X-Request-ID"));
            throw new TetherError({ code: "INTERNAL", status: res.status, message: `${what} error: ${ev.data.slice(0, 300)}` });
          }
          const rec = typeof data === "object" && data !== null ? (data as Record<string, unknown>) : {};
          yield { event: ev.event, data: rec };
        }
      }
    } finally {
      reader.releaseLock();
      await res.body.cancel().catch(() => undefined);
    }
  }

  // --- processes, terminals and watches (docs/processes.md) ---

  /**
   * POST /v1/sandboxes/{id}/processes: starts command (run by sh -c) or
   * argv in the background, and resolves once it runs. It belongs to the
   * sandbox: it outlives this client and ends with the sandbox, a signal,
   * or timeout_seconds. stdin: true keeps its stdin open for writeStdin;
   * pty: {rows, cols} runs it in a terminal (openTerminal).
   */
  startProcess(id: string, body: StartProcessRequest, opts: CallOptions = {}): Promise<Process> {
    return this.#call(opts.signal, () => this.#api.POST("/v1/sandboxes/{id}/processes", { params: { path: { id } }, body, signal: opts.signal }));
  }

  /** GET /v1/sandboxes/{id}/processes: the sandbox's processes, running and recently ended, oldest first. */
  listProcesses(id: string, opts: CallOptions = {}): Promise<ProcessList> {
    return this.#call(opts.signal, () => this.#api.GET("/v1/sandboxes/{id}/processes", { params: { path: { id } }, signal: opts.signal }));
  }

  /**
   * GET /v1/sandboxes/{id}/processes/{pid}: one process, by pid or tag;
   * with wait (a Go duration such as "30s"), once it ended or the wait
   * passed. 404 PROCESS_NOT_FOUND: none such, or it ended more than a minute ago.
   */
  getProcess(id: string, pid: ProcessRef, opts: CallOptions & { wait?: string } = {}): Promise<Process> {
    const query = opts.wait === undefined ? {} : { wait: opts.wait };
    const path = { id, pid: processId(pid) };
    return this.#call(opts.signal, () =>
      this.#api.GET("/v1/sandboxes/{id}/processes/{pid}", { params: { path, query }, signal: opts.signal }),
    );
  }

  /**
   * Long-polls the process until it ended, and resolves with it (its
   * exit). Rejects with a TetherError when timeoutMs passes first.
   */
  async waitProcess(id: string, pid: ProcessRef, opts: WaitProcessOptions = {}): Promise<Process> {
    const deadline = Date.now() + (opts.timeoutMs ?? 120_000);
    for (;;) {
      const left = Math.max(1, Math.ceil((deadline - Date.now()) / 1000));
      const p = await this.getProcess(id, pid, { wait: `${Math.min(left, 30)}s`, signal: opts.signal });
      if (!p.running) return p;
      if (Date.now() >= deadline) {
        throw new TetherError({ code: "UNAVAILABLE", status: 0, message: `process ${pid} of sandbox ${id} still runs after ${opts.timeoutMs ?? 120_000} ms` });
      }
    }
  }

  /**
   * GET /v1/sandboxes/{id}/processes/{pid}/output: follows the process's
   * output, from now or (from "start") from the start of what is kept:
   * a start event, then stdout, stderr or pty chunks and dropped events
   * as they come, then one exit event. Any number of clients may follow
   * one process; leaving the loop (or aborting) detaches, and the process
   * goes on. An error event (the sandbox ended) rejects with its TetherError.
   */
  async *processOutput(id: string, pid: ProcessRef, opts: ProcessOutputOptions = {}): AsyncGenerator<ProcessOutputEvent, void, undefined> {
    const query = new URLSearchParams({ from: opts.from ?? "now" });
    if (opts.encoding) query.set("encoding", opts.encoding);
    const res = await this.#raw("GET", processPath(id, pid, `/output?${query}`), {
      signal: opts.signal, headers: { Accept: "text/event-stream" },
    });
    for await (const { event, data } of this.#sse(res, "output stream", "an exit event", opts.signal)) {
      switch (event) {
        case "start":
          yield { type: "start", pid: Number(data["pid"] ?? 0) };
          break;
        case "stdout":
        case "stderr":
        case "pty": {
          const out: ProcessOutputEvent = { type: event, data: typeof data["data"] === "string" ? data["data"] : "", offset: Number(data["offset"] ?? 0) };
          if (typeof data["data_base64"] === "string") out.bytes = fromBase64(data["data_base64"]);
          yield out;
          break;
        }
        case "dropped":
          yield { type: "dropped", bytes: Number(data["bytes"] ?? 0), offset: Number(data["offset"] ?? 0) };
          break;
        case "exit":
          yield { type: "exit", exit: data as unknown as ProcessExit };
          return;
      }
    }
  }

  /**
   * POST /v1/sandboxes/{id}/processes/{pid}/stdin: writes data to the
   * process's stdin (one started with stdin: true) or, for a terminal,
   * types it; close: true closes its stdin after. 409
   * PROCESS_STATE_CONFLICT: it has no stdin, its stdin is closed, or it ended.
   */
  async writeStdin(id: string, pid: ProcessRef, data: Uint8Array | string, opts: CallOptions & { close?: boolean } = {}): Promise<void> {
    const close = opts.close ? "?close=true" : "";
    const res = await this.#raw("POST", processPath(id, pid, `/stdin${close}`), {
      signal: opts.signal, body: data, headers: { "Content-Type": "application/octet-stream" },
    });
    await res.body?.cancel();
  }

  /** Closes the process's stdin: it reads end of file. (A terminal takes ^D, "\x04", through writeStdin instead.) */
  closeStdin(id: string, pid: ProcessRef, opts: CallOptions = {}): Promise<void> {
    return this.writeStdin(id, pid, "", { ...opts, close: true });
  }

  /** POST /v1/sandboxes/{id}/processes/{pid}/signal: sends the signal (TERM, KILL, INT, HUP, ... or its number) to the process and its process group. */
  async signalProcess(id: string, pid: ProcessRef, signal: string | number = "TERM", opts: CallOptions = {}): Promise<void> {
    const path = { id, pid: processId(pid) };
    await this.#call(opts.signal, () =>
      this.#api.POST("/v1/sandboxes/{id}/processes/{pid}/signal", { params: { path }, body: { signal: String(signal) }, signal: opts.signal }),
    );
  }

  /** POST /v1/sandboxes/{id}/processes/{pid}/resize: sets the size of the process's terminal; the program gets SIGWINCH. */
  async resizeProcess(id: string, pid: ProcessRef, size: TerminalSize, opts: CallOptions = {}): Promise<void> {
    const path = { id, pid: processId(pid) };
    await this.#call(opts.signal, () =>
      this.#api.POST("/v1/sandboxes/{id}/processes/{pid}/resize", { params: { path }, body: size, signal: opts.signal }),
    );
  }

  /**
   * GET /v1/sandboxes/{id}/processes/{pid}/terminal: a WebSocket to the
   * terminal of a process started with pty, resolved once open. A
   * connection that cannot open rejects with the process's TetherError
   * (PROCESS_NOT_FOUND; PROCESS_STATE_CONFLICT for a process without a
   * terminal), or UNAVAILABLE. Aborting the signal closes the terminal.
   *
   * WebSocket: options.WebSocket, else the global WebSocket (browsers,
   * Node 22; Node 20 only with --experimental-websocket), else the ws
   * package's (an optional peer dependency). The API key goes in the
   * Authorization header with ws, in the subprotocol list otherwise
   * (browsers cannot set headers on a WebSocket).
   */
  async openTerminal(id: string, pid: ProcessRef, opts: TerminalOptions = {}): Promise<Terminal> {
    opts.signal?.throwIfAborted();
    const url = this.baseUrl.replace(/^http/, "ws") + processPath(id, pid, `/terminal?from=${opts.from ?? "start"}`);
    let ws: WebSocketLike;
    const given = opts.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (given) {
      ws = new given(url, ["tether.v1", `tether.bearer.${this.#apiKey}`]);
    } else {
      const Ws = await wsPackage();
      if (!Ws) {
        throw new TypeError("openTerminal needs a WebSocket: Node 22 or later, node --experimental-websocket, the ws package (npm install ws), or options.WebSocket");
      }
      ws = new Ws(url, ["tether.v1"], { headers: { Authorization: `Bearer ${this.#apiKey}` } });
    }
    // Listening before it opens: the server's first frames may come in
    // the same read as its answer to the upgrade.
    const term = new Terminal(ws, String(pid));
    let opened = false;
    const failure = await new Promise<unknown>((resolve) => {
      let detail: unknown;
      ws.addEventListener("open", () => { opened = true; resolve(undefined); });
      ws.addEventListener("error", (ev) => { detail = ev.error ?? ev.message ?? detail; });
      ws.addEventListener("close", (ev) => resolve(detail ?? new Error(`closed (${ev.code ?? 1006}) before it opened`)));
      opts.signal?.addEventListener("abort", () => {
        term.close();
        if (!opened) resolve(abortReason(opts.signal));
      }, { once: true });
    });
    if (opts.signal?.aborted) throw abortReason(opts.signal);
    if (failure !== undefined) throw await this.#terminalRefused(id, pid, failure);
    return term;
  }

  /**
   * Why a terminal's WebSocket did not open: a WebSocket does not show the
   * answer to a refused upgrade, so the process is asked for.
   */
  async #terminalRefused(id: string, pid: ProcessRef, cause: unknown): Promise<TetherError> {
    let p: Process;
    try {
      p = await this.getProcess(id, pid);
    } catch (err) {
      if (err instanceof TetherError) return err;
      return networkError(err);
    }
    if (!p.pty) {
      return new TetherError({ code: "PROCESS_STATE_CONFLICT", status: 409, message: `PROCESS_STATE_CONFLICT: process ${p.pid} has no terminal (start it with pty)` });
    }
    const msg = cause instanceof Error ? cause.message : String(cause);
    return new TetherError({ code: "UNAVAILABLE", status: 0, message: `the terminal of process ${p.pid} did not open: ${msg}`, cause });
  }

  /**
   * GET /v1/sandboxes/{id}/watch: follows what changes under the folder at
   * path (below it too with recursive): a start event once the watch is
   * armed (every change after it is seen), then one event per change
   * (create, write, remove, rename, chmod; its path relative to the
   * folder). It goes on until the loop is left or aborted, or the sandbox
   * ends (rejects with its TetherError). 404 FILE_NOT_FOUND: no such
   * folder; 400 INVALID_PATH: not a folder.
   */
  async *watch(id: string, path = "/workspace", opts: CallOptions & { recursive?: boolean } = {}): AsyncGenerator<WatchEvent, void, undefined> {
    const query = new URLSearchParams({ path });
    if (opts.recursive) query.set("recursive", "true");
    const res = await this.#raw("GET", `/v1/sandboxes/${encodeURIComponent(id)}/watch?${query}`, {
      signal: opts.signal, headers: { Accept: "text/event-stream" },
    });
    for await (const { event, data } of this.#sse(res, "the watch", "an error event", opts.signal)) {
      switch (event) {
        case "start":
          yield { type: "start", path: typeof data["path"] === "string" ? data["path"] : path, recursive: data["recursive"] === true };
          break;
        case "create":
        case "write":
        case "remove":
        case "rename":
        case "chmod":
          yield { ...(data as unknown as FileChange), type: event, kind: event };
          break;
      }
    }
  }

  // --- files ---

  /** GET /v1/sandboxes/{id}/files: the file's bytes. */
  async readFile(id: string, path: string, opts: CallOptions = {}): Promise<Uint8Array> {
    const res = await this.#raw("GET", `/v1/sandboxes/${encodeURIComponent(id)}/files?path=${encodeURIComponent(path)}`, { signal: opts.signal });
    return this.#bytes(res, opts.signal);
  }

  /** PUT /v1/sandboxes/{id}/files: writes (replaces) the file, making parent folders. */
  async writeFile(id: string, path: string, content: Uint8Array | string, opts: CallOptions = {}): Promise<void> {
    const res = await this.#raw("PUT", `/v1/sandboxes/${encodeURIComponent(id)}/files?path=${encodeURIComponent(path)}`, {
      signal: opts.signal, body: content, headers: { "Content-Type": "application/octet-stream" },
    });
    await res.body?.cancel();
  }

  /** GET /v1/sandboxes/{id}/archive: the folder at path as a tar archive. */
  async getArchive(id: string, path: string, opts: CallOptions = {}): Promise<Uint8Array> {
    const res = await this.#raw("GET", `/v1/sandboxes/${encodeURIComponent(id)}/archive?path=${encodeURIComponent(path)}`, { signal: opts.signal });
    return this.#bytes(res, opts.signal);
  }

  /** PUT /v1/sandboxes/{id}/archive: extracts a tar archive into the folder at path. */
  async putArchive(id: string, path: string, tar: Uint8Array, opts: CallOptions = {}): Promise<void> {
    const res = await this.#raw("PUT", `/v1/sandboxes/${encodeURIComponent(id)}/archive?path=${encodeURIComponent(path)}`, {
      signal: opts.signal, body: tar, headers: { "Content-Type": "application/x-tar" },
    });
    await res.body?.cancel();
  }

  async #bytes(res: Response, signal: AbortSignal | undefined): Promise<Uint8Array> {
    try {
      return new Uint8Array(await res.arrayBuffer());
    } catch (err) {
      if (signal?.aborted) throw abortReason(signal);
      throw networkError(err);
    }
  }

  // --- owners ---

  /** PUT /v1/owners/{owner}/lease: the owner is alive for ttlSeconds from now. */
  putOwnerLease(owner: string, ttlSeconds: number, opts: CallOptions = {}): Promise<OwnerLease> {
    return this.#call(opts.signal, () => this.#api.PUT("/v1/owners/{owner}/lease", { params: { path: { owner } }, body: { ttl_seconds: ttlSeconds }, signal: opts.signal }));
  }

  /** DELETE /v1/owners/{owner}: ends the owner and all its live sandboxes. */
  releaseOwner(owner: string, opts: CallOptions = {}): Promise<OwnerRelease> {
    return this.#call(opts.signal, () => this.#api.DELETE("/v1/owners/{owner}", { params: { path: { owner } }, signal: opts.signal }));
  }
}

function parseSSE(block: string): { event: string; data: string } | undefined {
  let event = "message";
  const data: string[] = [];
  for (const line of block.split("\n")) {
    if (line === "" || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") event = value;
    else if (field === "data") data.push(value);
  }
  if (data.length === 0) return undefined;
  return { event, data: data.join("\n") };
}

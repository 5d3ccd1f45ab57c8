import createClient, { type Client } from "openapi-fetch";
import type { components, paths } from "./schema.js";
import { TetherError, errorFromResponse, isProblem, networkError } from "./errors.js";

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
export type Snapshot = Schemas["Snapshot"];
export type SnapshotList = Schemas["SnapshotList"];
export type ListSnapshotsQuery = NonNullable<paths["/v1/snapshots"]["get"]["parameters"]["query"]>;
export type ListWebhookDeliveriesQuery = NonNullable<paths["/v1/webhooks/{id}/deliveries"]["get"]["parameters"]["query"]>;

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
    if (!res.body) throw new TetherError({ code: "INTERNAL", status: res.status, message: "exec stream without a body" });
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    try {
      for (;;) {
        let chunk: ReadableStreamReadResult<string>;
        try {
          chunk = await reader.read();
        } catch (err) {
          if (opts.signal?.aborted) throw abortReason(opts.signal);
          throw networkError(err);
        }
        if (chunk.done) break;
        buf += chunk.value.replace(/\r\n?/g, "\n");
        let idx: number;
        while ((idx = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, idx);
          buf = buf.slice(idx + 2);
          const ev = parseSSE(block);
          if (!ev) continue;
          const out = sseEvent(ev.event, ev.data, res);
          if (out === undefined) continue;
          yield out;
          if (out.type === "exit") return;
        }
      }
    } finally {
      reader.releaseLock();
      await res.body.cancel().catch(() => undefined);
    }
    throw new TetherError({ code: "UNAVAILABLE", status: 0, message: "exec stream ended without an exit event" });
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

function sseEvent(event: string, raw: string, res: Response): ExecStreamEvent | undefined {
  let data: unknown;
  try {
    data = JSON.parse(raw);
  } catch {
    throw new TetherError({ code: "INTERNAL", status: res.status, message: `exec stream: bad ${event} event data: ${raw.slice(0, 200)}` });
  }
  const rec = typeof data === "object" && data !== null ? (data as Record<string, unknown>) : {};
  switch (event) {
    case "stdout":
    case "stderr":
      return { type: event, data: typeof rec["data"] === "string" ? rec["data"] : "" };
    case "exit":
      return { type: "exit", result: data as ExecResult };
    case "error":
      if (isProblem(data)) throw TetherError.fromProblem(data, res.headers.get("X-Request-ID"));
      throw new TetherError({ code: "INTERNAL", status: res.status, message: `exec stream error: ${raw.slice(0, 300)}` });
    default:
      return undefined;
  }
}

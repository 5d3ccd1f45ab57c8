import type { components } from "./schema.js";

/** A Problem document (RFC 9457) as Tether sends it. */
export type Problem = components["schemas"]["Problem"];
/** The stable error codes of Tether's Problems. */
export type ProblemCode = Problem["code"];
/** A sandbox's lifecycle state. */
export type SandboxState = components["schemas"]["SandboxState"];

/**
 * The one error class of this client: a Problem Tether answered with, or
 * (status 0, code UNAVAILABLE) a request that never got an answer.
 * An aborted call rejects with the signal's reason instead (an AbortError).
 */
export class TetherError extends Error {
  /** The stable, machine-readable code (Problem.code). */
  readonly code: ProblemCode;
  /** The HTTP status; 0 when no response arrived. */
  readonly status: number;
  /** The sandbox's state, for SANDBOX_STATE_CONFLICT; undefined otherwise. */
  readonly state: SandboxState | undefined;
  /** The request id Tether logged the request under, when known. */
  readonly requestId: string | undefined;
  /** The Problem document, when Tether sent one. */
  readonly problem: Problem | undefined;

  constructor(init: {
    code: ProblemCode;
    status: number;
    message: string;
    state?: SandboxState | undefined;
    requestId?: string | undefined;
    problem?: Problem | undefined;
    cause?: unknown;
  }) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = "TetherError";
    this.code = init.code;
    this.status = init.status;
    this.state = init.state;
    this.requestId = init.requestId;
    this.problem = init.problem;
  }

  /** Builds the error from a Problem document. */
  static fromProblem(problem: Problem, requestId?: string | null): TetherError {
    return new TetherError({
      code: problem.code,
      status: problem.status,
      message: `${problem.code}: ${problem.detail}`,
      state: problem.state,
      requestId: problem.request_id ?? requestId ?? undefined,
      problem,
    });
  }
}

/**
 * Every code of docs/openapi.json's Problem, as a record so that the
 * compiler refuses it when a code is missing (schema.ts is regenerated
 * from the document).
 */
const knownCodes: Record<ProblemCode, true> = {
  INVALID_REQUEST: true, UNAUTHENTICATED: true, FORBIDDEN: true, NOT_FOUND: true, SANDBOX_STATE_CONFLICT: true,
  IDEMPOTENCY_KEY_REUSED: true, SANDBOX_ID_TAKEN: true, POOL_EXISTS: true, POOL_EMPTY: true,
  SNAPSHOT_NOT_READY: true, SNAPSHOT_PROVIDER_MISMATCH: true, UNKNOWN_PROVIDER: true, PROVIDER_UNAVAILABLE: true,
  NOT_SUPPORTED: true, PAYLOAD_TOO_LARGE: true, QUOTA_EXCEEDED: true, REQUEST_TIMEOUT: true, FILE_NOT_FOUND: true,
  IS_DIRECTORY: true, PERMISSION_DENIED: true, INVALID_PATH: true, PROCESS_NOT_FOUND: true,
  PROCESS_STATE_CONFLICT: true, PORT_UNREACHABLE: true, PREVIEW_GONE: true, INTERNAL: true, UNAVAILABLE: true,
};

const codes: ReadonlySet<string> = new Set(Object.keys(knownCodes));

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Reports whether v looks like a Problem document. */
export function isProblem(v: unknown): v is Problem {
  return isRecord(v) && typeof v["code"] === "string" && codes.has(v["code"]) && typeof v["status"] === "number";
}

function statusCode(status: number): ProblemCode {
  switch (status) {
    case 400: return "INVALID_REQUEST";
    case 401: return "UNAUTHENTICATED";
    case 403: return "FORBIDDEN";
    case 404: return "NOT_FOUND";
    case 409: return "SANDBOX_STATE_CONFLICT";
    case 408: return "REQUEST_TIMEOUT";
    case 413: return "PAYLOAD_TOO_LARGE";
    case 429: return "QUOTA_EXCEEDED";
    case 410: return "PREVIEW_GONE";
    case 501: return "NOT_SUPPORTED";
    case 502: return "PORT_UNREACHABLE";
    case 503: return "UNAVAILABLE";
    default: return status >= 500 ? "INTERNAL" : "INVALID_REQUEST";
  }
}

/** Builds the error for a non-2xx response whose body was body (parsed JSON, text, or undefined). */
export function errorFromResponse(response: Response, body: unknown): TetherError {
  const requestId = response.headers.get("X-Request-ID");
  if (isProblem(body)) return TetherError.fromProblem(body, requestId);
  const text = typeof body === "string" ? body : body === undefined ? "" : JSON.stringify(body);
  return new TetherError({
    code: statusCode(response.status),
    status: response.status,
    message: `HTTP ${response.status}${text ? `: ${text.slice(0, 300)}` : ""}`,
    requestId: requestId ?? undefined,
  });
}

/** Builds the error for a request that got no response (a network failure). */
export function networkError(cause: unknown): TetherError {
  const msg = cause instanceof Error ? cause.message : String(cause);
  return new TetherError({ code: "UNAVAILABLE", status: 0, message: `Tether unreachable: ${msg}`, cause });
}

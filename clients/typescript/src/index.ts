export { TetherClient, isSettling, newSandboxId } from "./client.js";
export type {
  CallOptions, CreateOptions, CreateSandboxRequest, Event, EventList, ExecRequest, ExecResult, ExecStreamEvent,
  Health, ListEventsQuery, ListSandboxEventsQuery, ListSandboxesQuery, OwnerLease as OwnerLeaseInfo, OwnerRelease,
  Provider, ProviderList, Sandbox, SandboxList, SandboxReason, TetherClientOptions, WaitOptions,
} from "./client.js";
export { TetherError, isProblem } from "./errors.js";
export type { Problem, ProblemCode, SandboxState } from "./errors.js";
export { OwnerLease, DEFAULT_OWNER_TTL, defaultOwnerName, processOwner } from "./owner.js";
export type { OwnerLeaseOptions } from "./owner.js";
export type { components, paths, operations } from "./schema.js";

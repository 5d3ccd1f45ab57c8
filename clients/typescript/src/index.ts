export { TetherClient, isSettling, newSandboxId } from "./client.js";
export type {
  CallOptions, CreateOptions, CreateSandboxRequest, Event, EventList, ExecRequest, ExecResult, ExecStreamEvent,
  Health, ListEventsQuery, ListSandboxEventsQuery, ListSandboxesQuery, OwnerLease as OwnerLeaseInfo, OwnerRelease,
  Provider, ProviderList, Sandbox, SandboxList, SandboxReason, Snapshot, SnapshotList, ListSnapshotsQuery, TetherClientOptions, WaitOptions,
  CreatedWebhook, CreateWebhookRequest, ListWebhookDeliveriesQuery, ReplayWebhookRequest, Webhook, WebhookDelivery,
  WebhookDeliveryList, WebhookList, Preview, PreviewList, PreviewRequest,
  SandboxNetwork, UpdateNetworkRequest, NetworkCredential, NetworkPolicy, NetworkPolicyList, PutNetworkPolicyRequest, Secret, SecretList,
  Process, ProcessList, ProcessExit, ProcessRef, StartProcessRequest, TerminalSize, FileChange,
  ProcessOutputEvent, ProcessOutputOptions, WaitProcessOptions, WatchEvent, TerminalOptions,
} from "./client.js";
export { Terminal } from "./terminal.js";
export type { TerminalEvent, WebSocketConstructor, WebSocketLike, WebSocketLikeEvent } from "./terminal.js";
export { verifySignature, SIGNATURE_HEADER, DELIVERY_HEADER } from "./webhooks.js";
export type { VerifyOptions } from "./webhooks.js";
export { TetherError, isProblem } from "./errors.js";
export type { Problem, ProblemCode, SandboxState } from "./errors.js";
export { OwnerLease, DEFAULT_OWNER_TTL, defaultOwnerName, processOwner } from "./owner.js";
export type { OwnerLeaseOptions } from "./owner.js";
export type { components, paths, operations } from "./schema.js";

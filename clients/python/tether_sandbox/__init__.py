"""tether-sandbox: the Python client of Tether, and its dcode provider.

* :class:`Tether` / :class:`AsyncTether` — the whole v1 API, sync and async,
  background processes, terminals and folder watches included.
* :class:`TetherProvider` / :class:`TetherSandbox` — a deepagents-code
  ``SandboxProvider`` and a deepagents ``BaseSandbox`` (entry point
  ``deepagents_code.sandbox_providers: tether``).
* :func:`verify_signature` — check a webhook delivery's Tether-Signature.
* :class:`TetherError` — every failure: ``code``, ``status``, ``state``, ``detail``;
  a dcode ``SandboxError``.
"""

from ._client import AsyncTether, Tether
from ._compat import (
    HAVE_DEEPAGENTS,
    HAVE_DEEPAGENTS_CODE,
    ExecuteResponse,
    FileDownloadResponse,
    FileUploadResponse,
)
from ._errors import TetherClosedError, TetherError
from ._models import (
    Capabilities,
    Event,
    EventPage,
    ExecEvent,
    ExecExit,
    ExecOutput,
    ExecResult,
    FileChange,
    NetworkCredential,
    NetworkPolicy,
    OwnerLease,
    OwnerRelease,
    Preview,
    Process,
    ProcessDropped,
    ProcessEnded,
    ProcessEvent,
    ProcessExit,
    ProcessOutput,
    ProcessStarted,
    ProviderInfo,
    RenewedSandbox,
    Sandbox,
    SandboxNetwork,
    SandboxPage,
    Secret,
    Snapshot,
    SnapshotPage,
    CreatedWebhook,
    Webhook,
    WebhookDelivery,
    WebhookDeliveryPage,
    WatchEvent,
    WatchStarted,
)
from ._core import new_sandbox_id
from ._webhooks import DELIVERY_HEADER, SIGNATURE_HEADER, verify_signature
from ._version import __version__
from .provider import (
    DEFAULT_EXEC_TIMEOUT,
    TetherLoopBlockedError,
    TetherProvider,
    TetherSandbox,
    TetherSandboxNotFoundError,
    default_owner_name,
    resolve_sandbox_path,
)

__all__ = [
    "AsyncTether",
    "Tether",
    "TetherError",
    "TetherClosedError",
    "TetherProvider",
    "TetherSandbox",
    "TetherSandboxNotFoundError",
    "TetherLoopBlockedError",
    "DEFAULT_EXEC_TIMEOUT",
    "default_owner_name",
    "resolve_sandbox_path",
    "new_sandbox_id",
    "__version__",
    "ExecuteResponse",
    "FileUploadResponse",
    "FileDownloadResponse",
    "HAVE_DEEPAGENTS",
    "HAVE_DEEPAGENTS_CODE",
    "Capabilities",
    "Event",
    "EventPage",
    "ExecEvent",
    "ExecExit",
    "ExecOutput",
    "ExecResult",
    "FileChange",
    "NetworkCredential",
    "NetworkPolicy",
    "OwnerLease",
    "OwnerRelease",
    "Preview",
    "Process",
    "ProcessDropped",
    "ProcessEnded",
    "ProcessEvent",
    "ProcessExit",
    "ProcessOutput",
    "ProcessStarted",
    "ProviderInfo",
    "RenewedSandbox",
    "Sandbox",
    "SandboxNetwork",
    "SandboxPage",
    "Secret",
    "Snapshot",
    "SnapshotPage",
    "CreatedWebhook",
    "Webhook",
    "WebhookDelivery",
    "WebhookDeliveryPage",
    "WatchEvent",
    "WatchStarted",
    "verify_signature",
    "SIGNATURE_HEADER",
    "DELIVERY_HEADER",
]

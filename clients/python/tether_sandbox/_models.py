"""Typed results of the Tether API (docs/swagger.yaml), as dataclasses.

Every result keeps the JSON it came from in ``raw`` so that fields a newer
server adds are not lost.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Optional, Union

__all__ = [
    "Sandbox",
    "RenewedSandbox",
    "SandboxPage",
    "Snapshot",
    "SnapshotPage",
    "Event",
    "EventPage",
    "ExecResult",
    "ExecOutput",
    "ExecExit",
    "ExecEvent",
    "OwnerLease",
    "OwnerRelease",
    "Capabilities",
    "ProviderInfo",
    "Preview",
    "Process",
    "ProcessExit",
    "ProcessStarted",
    "ProcessOutput",
    "ProcessDropped",
    "ProcessEnded",
    "ProcessEvent",
    "WatchStarted",
    "FileChange",
    "WatchEvent",
    "Webhook",
    "CreatedWebhook",
    "WebhookDelivery",
    "WebhookDeliveryPage",
    "PENDING_STATES",
    "TERMINAL_STATES",
    "TRANSITIONING_STATES",
]

PENDING_STATES = frozenset({"requested", "creating"})
# A pause or a resume under way: the sandbox is not settled until it is paused or ready again.
TRANSITIONING_STATES = frozenset({"pausing", "resuming"})
"""States from which a sandbox may still become ready."""

TERMINAL_STATES = frozenset({"cancelled", "terminated", "failed"})
"""States a sandbox never leaves."""

_FRACTION = re.compile(r"(\.\d+)")


def parse_time(value: Any) -> Optional[datetime]:
    """An RFC 3339 time as Go writes it (Z, up to nanoseconds) as a datetime."""
    if not value or not isinstance(value, str):
        return None
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    # datetime.fromisoformat (3.10) takes at most 6 fractional digits.
    text = _FRACTION.sub(lambda m: (m.group(1) + "000000")[:7], text, count=1)
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _str(value: Any) -> Optional[str]:
    return value if isinstance(value, str) else None


@dataclass
class Sandbox:
    """A sandbox as the API shows it."""

    id: str
    state: str
    provider: str = ""
    owner: Optional[str] = None
    labels: dict[str, str] = field(default_factory=dict)
    reason: Optional[str] = None
    error: Optional[str] = None
    released: bool = False
    release_error: Optional[str] = None
    provider_id: Optional[str] = None
    work_dir: Optional[str] = None
    attempts: int = 0
    created_at: Optional[datetime] = None
    updated_at: Optional[datetime] = None
    ready_at: Optional[datetime] = None
    ended_at: Optional[datetime] = None
    released_at: Optional[datetime] = None
    expires_at: Optional[datetime] = None
    create_deadline: Optional[datetime] = None
    on_end: Optional[str] = None
    """"snapshot" for a sandbox that takes an exit snapshot when it ends."""
    from_snapshot: Optional[str] = None
    """The snapshot the sandbox started from."""
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    @property
    def pending(self) -> bool:
        """Still requested or creating."""
        return self.state in PENDING_STATES

    @property
    def paused(self) -> bool:
        return self.state == "paused"

    @property
    def settled(self) -> bool:
        """Neither requested or creating, nor pausing or resuming."""
        return self.state not in PENDING_STATES and self.state not in TRANSITIONING_STATES

    @property
    def terminal(self) -> bool:
        """Ended: cancelled, terminated or failed."""
        return self.state in TERMINAL_STATES

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Sandbox":
        return cls(
            id=d["id"],
            state=d["state"],
            provider=d.get("provider") or "",
            owner=_str(d.get("owner")),
            labels=dict(d.get("labels") or {}),
            reason=_str(d.get("reason")),
            error=_str(d.get("error")),
            released=bool(d.get("released")),
            release_error=_str(d.get("release_error")),
            provider_id=_str(d.get("provider_id")),
            work_dir=_str(d.get("work_dir")),
            attempts=int(d.get("attempts") or 0),
            created_at=parse_time(d.get("created_at")),
            updated_at=parse_time(d.get("updated_at")),
            ready_at=parse_time(d.get("ready_at")),
            ended_at=parse_time(d.get("ended_at")),
            released_at=parse_time(d.get("released_at")),
            expires_at=parse_time(d.get("expires_at")),
            create_deadline=parse_time(d.get("create_deadline")),
            on_end=_str(d.get("on_end")),
            from_snapshot=_str(d.get("from_snapshot")),
            raw=d,
        )


@dataclass
class Snapshot:
    """A snapshot of a sandbox's /workspace (docs/snapshots.md)."""

    id: str
    state: str
    """creating, ready, failed, lost or deleted."""
    kind: str = "manual"
    """manual, or exit (taken when an on_end="snapshot" sandbox ended)."""
    source_sandbox_id: str = ""
    provider: str = ""
    size_bytes: int = 0
    error: Optional[str] = None
    created_at: Optional[datetime] = None
    ready_at: Optional[datetime] = None
    expires_at: Optional[datetime] = None
    deleted_at: Optional[datetime] = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Snapshot":
        return cls(
            id=d["id"],
            state=d["state"],
            kind=d.get("kind") or "manual",
            source_sandbox_id=d.get("source_sandbox_id") or "",
            provider=d.get("provider") or "",
            size_bytes=int(d.get("size_bytes") or 0),
            error=_str(d.get("error")),
            created_at=parse_time(d.get("created_at")),
            ready_at=parse_time(d.get("ready_at")),
            expires_at=parse_time(d.get("expires_at")),
            deleted_at=parse_time(d.get("deleted_at")),
            raw=d,
        )


@dataclass
class SnapshotPage:
    """A page of snapshots, newest first; pass next_cursor back for the next."""

    items: list[Snapshot]
    next_cursor: Optional[str] = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "SnapshotPage":
        return cls([Snapshot.from_json(i) for i in d.get("items") or []], _str(d.get("next_cursor")))


@dataclass
class RenewedSandbox(Sandbox):
    """A sandbox after a renewal; capped when the max lifetime cut the TTL."""

    capped: bool = False

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "RenewedSandbox":
        sb = Sandbox.from_json(d)
        return cls(**{**sb.__dict__, "capped": bool(d.get("capped"))})


@dataclass
class SandboxPage:
    """A page of sandboxes, newest first; pass next_cursor back for the next."""

    items: list[Sandbox]
    next_cursor: Optional[str] = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "SandboxPage":
        return cls([Sandbox.from_json(i) for i in d.get("items") or []], _str(d.get("next_cursor")))


@dataclass
class Event:
    """One transition of a sandbox."""

    id: int
    sandbox_id: str
    at: Optional[datetime]
    from_state: Optional[str]
    to_state: str
    reason: Optional[str] = None
    actor: str = ""
    message: str = ""
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Event":
        return cls(
            id=int(d["id"]),
            sandbox_id=d.get("sandbox_id") or "",
            at=parse_time(d.get("at")),
            from_state=_str(d.get("from")),
            to_state=d.get("to") or "",
            reason=_str(d.get("reason")),
            actor=d.get("actor") or "",
            message=d.get("message") or "",
            raw=d,
        )


@dataclass
class EventPage:
    """A page of events, oldest first."""

    items: list[Event]
    next_cursor: Optional[str] = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "EventPage":
        return cls([Event.from_json(i) for i in d.get("items") or []], _str(d.get("next_cursor")))


@dataclass
class ExecResult:
    """A command's outcome. exit_code is 124 when timed_out."""

    output: str
    exit_code: int
    truncated: bool = False
    timed_out: bool = False
    timeout_seconds: int = 0

    @classmethod
    def from_json(cls, d: dict[str, Any], output: Optional[str] = None) -> "ExecResult":
        return cls(
            output=d.get("output", "") if output is None else output,
            exit_code=int(d.get("exit_code", -1)),
            truncated=bool(d.get("truncated")),
            timed_out=bool(d.get("timed_out")),
            timeout_seconds=int(d.get("timeout_seconds") or 0),
        )


@dataclass
class ExecOutput:
    """A chunk of a streaming command's output; stream is stdout or stderr."""

    stream: str
    data: str


@dataclass
class ExecExit:
    """The end of a streaming command. result.output is everything streamed."""

    result: ExecResult


ExecEvent = Union[ExecOutput, ExecExit]


@dataclass
class OwnerLease:
    owner: str
    expires_at: Optional[datetime]

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "OwnerLease":
        return cls(d.get("owner") or "", parse_time(d.get("expires_at")))


@dataclass
class OwnerRelease:
    """What ending an owner did: the live sandboxes it ended."""

    owner: str
    sandboxes_ended: int = 0
    sandbox_ids: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "OwnerRelease":
        return cls(d.get("owner") or "", int(d.get("sandboxes_ended") or 0), list(d.get("sandbox_ids") or []))


@dataclass
class Capabilities:
    exec: bool = False
    files: bool = False
    pause: bool = False
    ports: bool = False
    """The provider reaches ports in sandboxes (port_url, create_preview)."""
    processes: bool = False
    """The provider runs background processes (start_process and the rest)."""
    pty: bool = False
    """The provider gives processes terminals (start_process(pty=...), resize_process)."""
    watch: bool = False
    """The provider watches folders for changes (watch)."""


@dataclass
class ProviderInfo:
    """An enabled provider and what it can do on this server."""

    name: str
    default: bool = False
    available: bool = False
    reason: Optional[str] = None
    capabilities: Capabilities = field(default_factory=Capabilities)
    work_dir: Optional[str] = None
    notes: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ProviderInfo":
        caps = d.get("capabilities") or {}
        return cls(
            name=d.get("name") or "",
            default=bool(d.get("default")),
            available=bool(d.get("available")),
            reason=_str(d.get("reason")),
            capabilities=Capabilities(
                exec=bool(caps.get("exec")),
                files=bool(caps.get("files")),
                pause=bool(caps.get("pause")),
                ports=bool(caps.get("ports")),
                processes=bool(caps.get("processes")),
                pty=bool(caps.get("pty")),
                watch=bool(caps.get("watch")),
            ),
            work_dir=_str(d.get("work_dir")),
            notes=list(d.get("notes") or []),
        )


@dataclass
class Webhook:
    """A webhook endpoint (docs/webhooks.md), without its secret."""

    id: str
    url: str
    description: str = ""
    states: list[str] = field(default_factory=list)
    """The filter's to-states; empty: every state."""
    reasons: list[str] = field(default_factory=list)
    """The filter's reasons; empty: every reason."""
    types: list[str] = field(default_factory=list)
    """The filter's event types (sandbox.state_changed, sandbox.released);
    empty: every type."""
    state: str = "active"
    """active, or failing once a delivery's retries ran out (replay it)."""
    failing_since: Optional[datetime] = None
    cursor: str = ""
    created_at: Optional[datetime] = None
    created_by: Optional[str] = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Webhook":
        events = d.get("events") or {}
        return cls(
            id=d.get("id") or "",
            url=d.get("url") or "",
            description=d.get("description") or "",
            states=list(events.get("states") or []),
            reasons=list(events.get("reasons") or []),
            types=list(events.get("types") or []),
            state=d.get("state") or "",
            failing_since=parse_time(d.get("failing_since")),
            cursor=d.get("cursor") or "",
            created_at=parse_time(d.get("created_at")),
            created_by=_str(d.get("created_by")),
            raw=d,
        )


@dataclass
class CreatedWebhook:
    """A new endpoint and its signing secret: the only time it is shown."""

    webhook: Webhook
    secret: str = field(repr=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "CreatedWebhook":
        return cls(Webhook.from_json(d.get("webhook") or {}), d.get("secret") or "")


@dataclass
class WebhookDelivery:
    """One batch of an endpoint's events; its id is the idempotency key."""

    id: str
    webhook_id: str
    status: str
    """pending, delivered, failed or cancelled."""
    event_ids: list[int] = field(default_factory=list)
    attempts: int = 0
    created_at: Optional[datetime] = None
    next_attempt_at: Optional[datetime] = None
    last_attempt_at: Optional[datetime] = None
    delivered_at: Optional[datetime] = None
    response_status: Optional[int] = None
    error: Optional[str] = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "WebhookDelivery":
        rs = d.get("response_status")
        return cls(
            id=d.get("id") or "",
            webhook_id=d.get("webhook_id") or "",
            status=d.get("status") or "",
            event_ids=[int(i) for i in d.get("event_ids") or []],
            attempts=int(d.get("attempts") or 0),
            created_at=parse_time(d.get("created_at")),
            next_attempt_at=parse_time(d.get("next_attempt_at")),
            last_attempt_at=parse_time(d.get("last_attempt_at")),
            delivered_at=parse_time(d.get("delivered_at")),
            response_status=int(rs) if isinstance(rs, int) else None,
            error=_str(d.get("error")),
            raw=d,
        )


@dataclass
class WebhookDeliveryPage:
    """A page of deliveries, newest first; pass next_cursor back for older ones."""

    items: list[WebhookDelivery]
    next_cursor: Optional[str] = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "WebhookDeliveryPage":
        return cls([WebhookDelivery.from_json(i) for i in d.get("items") or []], _str(d.get("next_cursor")))


@dataclass
class Preview:
    """A preview URL of a port of a sandbox (docs/ports.md). url and token
    are set only in the answer to its creation."""

    id: str
    sandbox_id: str
    port: int
    url: Optional[str] = None
    token: Optional[str] = None
    created_at: Optional[datetime] = None
    expires_at: Optional[datetime] = None
    revoked_at: Optional[datetime] = None
    key_id: Optional[str] = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Preview":
        return cls(
            id=d.get("id") or "",
            sandbox_id=d.get("sandbox_id") or "",
            port=int(d.get("port") or 0),
            url=_str(d.get("url")),
            token=_str(d.get("token")),
            created_at=parse_time(d.get("created_at")),
            expires_at=parse_time(d.get("expires_at")),
            revoked_at=parse_time(d.get("revoked_at")),
            key_id=_str(d.get("key_id")),
            raw=d,
        )


# -- network rules, policies and secrets (docs/providers.md) --------------


@dataclass
class NetworkCredential:
    """A header the egress proxy adds to an allow-list sandbox's HTTPS
    requests to host: header with format's {secret} replaced by the
    tenant's secret named secret (or basic authentication of username and
    the secret). The secret's value never enters the sandbox."""

    host: str
    secret: str
    header: Optional[str] = None
    format: Optional[str] = None
    username: Optional[str] = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "NetworkCredential":
        return cls(host=d.get("host") or "", secret=d.get("secret") or "", header=_str(d.get("header")),
                   format=_str(d.get("format")), username=_str(d.get("username")))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"host": self.host, "secret": self.secret}
        for name in ("header", "format", "username"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        return out


@dataclass
class SandboxNetwork:
    """A sandbox's way out: its mode and, for an allow-list sandbox, what it
    may reach (its own entries and its policies') and the credentials the
    egress proxy adds."""

    sandbox_id: str
    network: str
    allow: list[str] = field(default_factory=list)
    credentials: list[NetworkCredential] = field(default_factory=list)
    policies: list[str] = field(default_factory=list)
    missing_policies: list[str] = field(default_factory=list)
    edited: bool = False
    updated_at: Optional[datetime] = None
    credentials_until: Optional[datetime] = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "SandboxNetwork":
        return cls(
            sandbox_id=d.get("sandbox_id") or "",
            network=d.get("network") or "",
            allow=list(d.get("allow") or []),
            credentials=[NetworkCredential.from_json(c) for c in d.get("credentials") or []],
            policies=list(d.get("policies") or []),
            missing_policies=list(d.get("missing_policies") or []),
            edited=bool(d.get("edited")),
            updated_at=parse_time(d.get("updated_at")),
            credentials_until=parse_time(d.get("credentials_until")),
            raw=d,
        )


@dataclass
class NetworkPolicy:
    """A tenant's named network policy, which allow-list sandboxes attach
    by name."""

    name: str
    allow: list[str] = field(default_factory=list)
    credentials: list[NetworkCredential] = field(default_factory=list)
    created_at: Optional[datetime] = None
    updated_at: Optional[datetime] = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "NetworkPolicy":
        return cls(
            name=d.get("name") or "",
            allow=list(d.get("allow") or []),
            credentials=[NetworkCredential.from_json(c) for c in d.get("credentials") or []],
            created_at=parse_time(d.get("created_at")),
            updated_at=parse_time(d.get("updated_at")),
            raw=d,
        )


@dataclass
class Secret:
    """A tenant's secret, by name: Tether never shows its value."""

    name: str
    created_at: Optional[datetime] = None
    updated_at: Optional[datetime] = None
    updated_by: Optional[str] = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Secret":
        return cls(name=d.get("name") or "", created_at=parse_time(d.get("created_at")),
                   updated_at=parse_time(d.get("updated_at")), updated_by=_str(d.get("updated_by")), raw=d)


# -- processes, terminals and watches (docs/processes.md) ------------------


@dataclass
class ProcessExit:
    """How a process ended. code is its exit status, or -1 when a signal
    ended it (signal is then its number, 15 for SIGTERM, and exited False)."""

    code: int
    signal: int = 0
    exited: bool = True
    status: str = ""

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ProcessExit":
        return cls(
            code=int(d.get("code", -1)),
            signal=int(d.get("signal") or 0),
            exited=bool(d.get("exited")),
            status=d.get("status") or "",
        )


@dataclass
class Process:
    """A process of a sandbox, running or recently ended (kept a minute)."""

    pid: int
    argv: list[str] = field(default_factory=list)
    running: bool = False
    tag: str = ""
    """The tag it was started with; "" when none."""
    env: dict[str, str] = field(default_factory=dict)
    """The environment it was started with (its own, not the sandbox's)."""
    cwd: str = ""
    pty: Optional[tuple[int, int]] = None
    """Its terminal's size, (rows, cols); None for a process with pipes."""
    stdin: bool = False
    started_at: Optional[datetime] = None
    exit: Optional[ProcessExit] = None
    """How it ended; None while it runs."""
    kept_bytes: int = 0
    dropped_bytes: int = 0
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Process":
        pty = d.get("pty")
        ex = d.get("exit")
        return cls(
            pid=int(d["pid"]),
            argv=[str(a) for a in d.get("argv") or []],
            running=bool(d.get("running")),
            tag=d.get("tag") or "",
            env=dict(d.get("env") or {}),
            cwd=d.get("cwd") or "",
            pty=(int(pty["rows"]), int(pty["cols"])) if isinstance(pty, dict) else None,
            stdin=bool(d.get("stdin")),
            started_at=parse_time(d.get("started_at")),
            exit=ProcessExit.from_json(ex) if isinstance(ex, dict) else None,
            kept_bytes=int(d.get("kept_bytes") or 0),
            dropped_bytes=int(d.get("dropped_bytes") or 0),
            raw=d,
        )


@dataclass
class ProcessStarted:
    """The first event of an output stream."""

    pid: int


@dataclass
class ProcessOutput:
    """A chunk of a process's output. stream is stdout, stderr, or pty (a
    terminal's screen bytes). offset is where it starts in all of the
    process's output. With binary=True, data is "" and data_bytes holds
    the bytes exactly as written."""

    stream: str
    data: str
    offset: int = 0
    data_bytes: Optional[bytes] = field(default=None, repr=False)


@dataclass
class ProcessDropped:
    """Output that fell out of the kept window before this client read it."""

    bytes: int
    offset: int


@dataclass
class ProcessEnded:
    """The last event of an output stream: the process ended."""

    exit: ProcessExit


ProcessEvent = Union[ProcessStarted, ProcessOutput, ProcessDropped, ProcessEnded]


@dataclass
class WatchStarted:
    """The first event of a watch: it is armed, every change after it is seen."""

    path: str
    recursive: bool = False


@dataclass
class FileChange:
    """A change under a watched folder. kind is create, write, remove,
    rename (moved away from this name) or chmod; path is relative to the
    folder."""

    kind: str
    path: str
    is_dir: bool = False
    at: Optional[datetime] = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "FileChange":
        return cls(d.get("kind") or "", d.get("path") or "", bool(d.get("is_dir")), parse_time(d.get("at")))


WatchEvent = Union[WatchStarted, FileChange]

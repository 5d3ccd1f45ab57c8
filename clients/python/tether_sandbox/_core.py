"""The transport-free core of the client: what each route sends and how its
answer reads.

Every API operation is written once, here, as a generator ("op") that yields
the HTTP calls it needs (:class:`Call`) and receives each answer (an
``httpx.Response`` whose body has been read and whose status is 2xx). The
sync client (``httpx.Client``) and the async client (``httpx.AsyncClient``)
only drive these generators; neither knows any route. Operations that take
several requests (waiting for a sandbox across long-polls) compose with
``yield from``.

Streaming exec, a process's output and a watch are the routes whose
answers are read incrementally; their requests are built here too, and
their Server-Sent Events are decoded by an :class:`SSEDecoder`
(:class:`ExecStreamDecoder`, :class:`ProcessOutputDecoder`,
:class:`WatchDecoder`), which both clients feed line by line.
"""

from __future__ import annotations

import base64
import json
import os
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generator, Iterable, Mapping, Optional, TypeVar, Union
from urllib.parse import quote

from ._errors import TetherError
from ._models import (
    EventPage,
    ExecExit,
    ExecOutput,
    ExecResult,
    NetworkCredential,
    NetworkPolicy,
    OwnerLease,
    OwnerRelease,
    FileChange,
    Preview,
    Process,
    ProcessDropped,
    ProcessEnded,
    ProcessExit,
    ProcessOutput,
    ProcessStarted,
    ProviderInfo,
    WatchStarted,
    RenewedSandbox,
    Sandbox,
    SandboxNetwork,
    SandboxPage,
    Secret,
    Snapshot,
    SnapshotPage,
    CreatedWebhook,
    Webhook,
    WebhookDeliveryPage,
)

T = TypeVar("T")

EXEC_MAX = "exec-max"
"""Call.extra_timeout for an exec that asked for the server's maximum."""

LONG_POLL_CHUNK = 25.0
"""Seconds one long-poll asks the server to wait (below its 60 s MAX_WAIT)."""


@dataclass
class Call:
    """One HTTP request an operation needs."""

    method: str
    path: str
    params: list[tuple[str, str]] = field(default_factory=list)
    json: Any = None
    content: Optional[bytes] = None
    headers: dict[str, str] = field(default_factory=dict)
    extra_timeout: Union[float, str] = 0.0
    """Seconds the server may legitimately take on top of a normal answer
    (a long-poll's wait, a command's timeout), added to the client's read
    timeout; EXEC_MAX for the server's maximum exec timeout."""


Op = Generator[Call, Any, T]


_ID_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"


def new_sandbox_id() -> str:
    """A fresh sandbox id, made as the server makes them: "sbx_" and 26
    base32 characters of 128 bits, the time in milliseconds (48) then 80
    random bits. A create that carries it is idempotent on it, so the id is
    known before any I/O."""
    ms = time.time_ns() // 1_000_000
    n = ((ms & (1 << 48) - 1) << 80 | int.from_bytes(os.urandom(10), "big")) << 2  # 130 bits, as base32 pads
    chars = []
    for _ in range(26):
        chars.append(_ID_ALPHABET[n & 31])
        n >>= 5
    return "sbx_" + "".join(reversed(chars))


def _seg(value: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a non-empty string, got {value!r}")
    return quote(value, safe="")


def _sandbox_path(sandbox_id: str, suffix: str = "") -> str:
    return f"/v1/sandboxes/{_seg(sandbox_id)}{suffix}"


def _seconds(value: float) -> str:
    """A duration for ?wait=, as the Go duration syntax."""
    return f"{max(0.0, float(value)):.3f}s"


def _time(value: Union[datetime, str]) -> str:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("times must be timezone-aware")
        return value.isoformat()
    return value


def check(resp: Any) -> None:
    """Raise the TetherError a non-2xx response stands for (body already read)."""
    if resp.status_code >= 300:
        raise TetherError.from_problem(
            resp.status_code, resp.content, resp.headers.get("x-request-id"), resp.headers.get("retry-after")
        )


RETRY_CODES = frozenset({"QUOTA_EXCEEDED", "UNAVAILABLE"})
"""Refusals that did nothing and say when to come back: over a rate (429)
and Postgres unreachable (503). PROVIDER_UNAVAILABLE is not among them."""

MAX_RETRY_WAIT = 5.0
"""A Retry-After longer than this is not waited for: the error is raised."""


def retry_delay(err: TetherError, attempt: int, retries: int) -> Optional[float]:
    """Seconds to wait before retrying a refused request, or None to raise."""
    if attempt >= retries or err.code not in RETRY_CODES:
        return None
    delay = err.retry_after if err.retry_after is not None else 0.25 * 2**attempt
    return delay if delay <= MAX_RETRY_WAIT else None


# -- sandboxes -----------------------------------------------------------


def create_sandbox(
    *,
    id: Optional[str] = None,
    provider: Optional[str] = None,
    owner: Optional[str] = None,
    labels: Optional[Mapping[str, str]] = None,
    ttl_seconds: Optional[int] = None,
    env: Optional[Mapping[str, str]] = None,
    setup: Optional[str] = None,
    params: Optional[Mapping[str, Any]] = None,
    idempotency_key: Optional[str] = None,
    from_snapshot: Optional[str] = None,
    on_end: Optional[str] = None,
) -> Op[Sandbox]:
    body: dict[str, Any] = {}
    for name, value in (
        ("id", id),
        ("from_snapshot", from_snapshot),
        ("on_end", on_end),
        ("provider", provider),
        ("owner", owner),
        ("labels", dict(labels) if labels else None),
        ("ttl_seconds", ttl_seconds),
        ("env", dict(env) if env else None),
        ("setup", setup),
        ("params", dict(params) if params else None),
    ):
        if value is not None:
            body[name] = value
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    resp = yield Call("POST", "/v1/sandboxes", json=body, headers=headers)
    return Sandbox.from_json(resp.json())


def get_sandbox(sandbox_id: str, *, wait: Optional[float] = None, until: Optional[str] = None) -> Op[Sandbox]:
    params: list[tuple[str, str]] = []
    if wait:
        params.append(("wait", _seconds(wait)))
    if until:
        params.append(("until", until))
    resp = yield Call("GET", _sandbox_path(sandbox_id), params=params, extra_timeout=float(wait or 0))
    return Sandbox.from_json(resp.json())


def wait_sandbox(sandbox_id: str, *, timeout: float, until: str = "settled") -> Op[Sandbox]:
    """Long-poll until the sandbox settled (or is released), or timeout passed.

    Returns the sandbox as it is then; check ``settled``/``released``.
    """
    deadline = time.monotonic() + max(0.0, timeout)
    while True:
        remaining = deadline - time.monotonic()
        sb = yield from get_sandbox(
            sandbox_id,
            wait=min(LONG_POLL_CHUNK, remaining) if remaining > 0 else None,
            until=None if until == "settled" else until,
        )
        done = sb.released if until == "released" else sb.settled
        if done or remaining <= 0:
            return sb


def list_sandboxes(
    *,
    state: Union[str, Iterable[str], None] = None,
    owner: Optional[str] = None,
    provider: Optional[str] = None,
    labels: Optional[Mapping[str, str]] = None,
    created_after: Union[datetime, str, None] = None,
    created_before: Union[datetime, str, None] = None,
    released: Optional[bool] = None,
    limit: Optional[int] = None,
    cursor: Optional[str] = None,
) -> Op[SandboxPage]:
    params: list[tuple[str, str]] = []
    if state:
        for s in [state] if isinstance(state, str) else state:
            params.append(("state", s))
    if owner:
        params.append(("owner", owner))
    if provider:
        params.append(("provider", provider))
    for k, v in (labels or {}).items():
        params.append(("label", f"{k}={v}"))
    if created_after is not None:
        params.append(("created_after", _time(created_after)))
    if created_before is not None:
        params.append(("created_before", _time(created_before)))
    if released is not None:
        params.append(("released", "true" if released else "false"))
    if limit is not None:
        params.append(("limit", str(int(limit))))
    if cursor:
        params.append(("cursor", cursor))
    resp = yield Call("GET", "/v1/sandboxes", params=params)
    return SandboxPage.from_json(resp.json())


def delete_sandbox(sandbox_id: str) -> Op[Sandbox]:
    """Cancel or terminate; idempotent (202 ended now, 200 had ended)."""
    resp = yield Call("DELETE", _sandbox_path(sandbox_id))
    return Sandbox.from_json(resp.json())


def _snapshot_path(snapshot_id: str) -> str:
    return "/v1/snapshots/" + _seg(snapshot_id)


def create_snapshot(sandbox_id: str, *, wait: Optional[float] = None) -> Op[Snapshot]:
    """Snapshot a ready or paused sandbox's /workspace (202, creating); with
    wait (seconds), the server holds the answer until it settled."""
    params = [("wait", _seconds(wait))] if wait else []
    resp = yield Call("POST", _sandbox_path(sandbox_id, "/snapshots"), params=params, extra_timeout=float(wait or 0))
    return Snapshot.from_json(resp.json())


def get_snapshot(snapshot_id: str, *, wait: Optional[float] = None) -> Op[Snapshot]:
    params = [("wait", _seconds(wait))] if wait else []
    resp = yield Call("GET", _snapshot_path(snapshot_id), params=params, extra_timeout=float(wait or 0))
    return Snapshot.from_json(resp.json())


def list_snapshots(
    *, sandbox_id: Optional[str] = None, limit: Optional[int] = None, cursor: Optional[str] = None
) -> Op[SnapshotPage]:
    params: list[tuple[str, str]] = []
    if sandbox_id:
        params.append(("sandbox", sandbox_id))
    if limit is not None:
        params.append(("limit", str(int(limit))))
    if cursor:
        params.append(("cursor", cursor))
    resp = yield Call("GET", "/v1/snapshots", params=params)
    return SnapshotPage.from_json(resp.json())


def delete_snapshot(snapshot_id: str) -> Op[Snapshot]:
    """Delete; idempotent (202 deleted now, 200 was deleted)."""
    resp = yield Call("DELETE", _snapshot_path(snapshot_id))
    return Snapshot.from_json(resp.json())


def renew_sandbox(sandbox_id: str, ttl_seconds: int) -> Op[RenewedSandbox]:
    resp = yield Call("POST", _sandbox_path(sandbox_id, "/renew"), json={"ttl_seconds": int(ttl_seconds)})
    return RenewedSandbox.from_json(resp.json())


def _transition(sandbox_id: str, op: str, wait: Optional[float]) -> Op[Sandbox]:
    params: list[tuple[str, str]] = []
    if wait:
        params.append(("wait", _seconds(wait)))
    resp = yield Call("POST", _sandbox_path(sandbox_id, "/" + op), params=params, extra_timeout=float(wait or 0))
    return Sandbox.from_json(resp.json())


def pause_sandbox(sandbox_id: str, *, wait: Optional[float] = None) -> Op[Sandbox]:
    """Ask for a ready sandbox to be paused; with wait (seconds), until it is
    no longer pausing or wait passed. Idempotent."""
    return (yield from _transition(sandbox_id, "pause", wait))


def resume_sandbox(sandbox_id: str, *, wait: Optional[float] = None) -> Op[Sandbox]:
    """Ask for a paused sandbox to be resumed; with wait (seconds), until it
    is no longer resuming or wait passed. Idempotent."""
    return (yield from _transition(sandbox_id, "resume", wait))


def transfer_sandbox(sandbox_id: str, owner: str) -> Op[Sandbox]:
    """Give the sandbox to owner (starting its lease if it has none)."""
    resp = yield Call("PUT", _sandbox_path(sandbox_id, "/owner"), json={"owner": owner})
    return Sandbox.from_json(resp.json())


def _page_params(after: Optional[int], limit: Optional[int], cursor: Optional[str]) -> list[tuple[str, str]]:
    params: list[tuple[str, str]] = []
    if cursor:
        params.append(("cursor", cursor))
    elif after is not None:
        params.append(("after", str(int(after))))
    if limit is not None:
        params.append(("limit", str(int(limit))))
    return params


def sandbox_events(
    sandbox_id: str, *, after: Optional[int] = None, limit: Optional[int] = None, cursor: Optional[str] = None
) -> Op[EventPage]:
    resp = yield Call("GET", _sandbox_path(sandbox_id, "/events"), params=_page_params(after, limit, cursor))
    return EventPage.from_json(resp.json())


def events(*, after: Optional[int] = None, limit: Optional[int] = None, cursor: Optional[str] = None) -> Op[EventPage]:
    """The tenant's event feed, oldest first."""
    resp = yield Call("GET", "/v1/events", params=_page_params(after, limit, cursor))
    return EventPage.from_json(resp.json())


# -- owners --------------------------------------------------------------


def renew_owner_lease(owner: str, ttl_seconds: int) -> Op[OwnerLease]:
    resp = yield Call("PUT", f"/v1/owners/{_seg(owner)}/lease", json={"ttl_seconds": int(ttl_seconds)})
    return OwnerLease.from_json(resp.json())


def end_owner(owner: str) -> Op[OwnerRelease]:
    resp = yield Call("DELETE", f"/v1/owners/{_seg(owner)}")
    return OwnerRelease.from_json(resp.json())


# -- data plane ----------------------------------------------------------


def _exec_body(
    command: str, timeout: Optional[int], env: Optional[Mapping[str, str]], workdir: Optional[str]
) -> tuple[dict[str, Any], Union[float, str]]:
    body: dict[str, Any] = {"command": command}
    if timeout is None:
        extra: Union[float, str] = 60.0  # the server's default
    else:
        timeout = int(timeout)
        if timeout < 0:
            raise ValueError("timeout must be None (the server's default), 0 (its maximum) or positive")
        body["timeout_seconds"] = timeout
        extra = EXEC_MAX if timeout == 0 else float(timeout)
    if env:
        body["env"] = dict(env)
    if workdir:
        body["workdir"] = workdir
    return body, extra


def exec_command(
    sandbox_id: str,
    command: str,
    *,
    timeout: Optional[int] = None,
    env: Optional[Mapping[str, str]] = None,
    workdir: Optional[str] = None,
) -> Op[ExecResult]:
    """Run sh -c command. timeout: None = the server default (60 s), 0 = its maximum."""
    body, extra = _exec_body(command, timeout, env, workdir)
    resp = yield Call("POST", _sandbox_path(sandbox_id, "/exec"), json=body, extra_timeout=extra)
    return ExecResult.from_json(resp.json())


def exec_stream_call(
    sandbox_id: str,
    command: str,
    *,
    timeout: Optional[int] = None,
    env: Optional[Mapping[str, str]] = None,
    workdir: Optional[str] = None,
) -> Call:
    """The request of a streaming exec; read its answer with ExecStreamDecoder."""
    body, extra = _exec_body(command, timeout, env, workdir)
    return Call(
        "POST",
        _sandbox_path(sandbox_id, "/exec"),
        json=body,
        headers={"Accept": "text/event-stream"},
        extra_timeout=extra,
    )


class SSEDecoder:
    """Turns the lines of a stream of Server-Sent Events into events.

    ``feed(line)`` returns the events a line completes; an ``error`` event
    raises its TetherError. ``finish()``, once the stream ended, returns
    what its last lines hold and raises if the stream ended before its
    end (``done``). Subclasses say what each event's JSON data becomes.
    """

    what = "the stream"
    end = "its end"

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []
        self.done = False

    def feed(self, line: str) -> list[Any]:
        line = line.rstrip("\r\n")
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return []
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return []

    def _dispatch(self) -> list[Any]:
        event, data = self._event or "message", "\n".join(self._data)
        self._event, self._data = "", []
        if not data:
            return []
        try:
            payload = json.loads(data)
        except ValueError:
            raise TetherError("INVALID_STREAM", 0, f"unreadable {event} event: {data[:200]!r}") from None
        if not isinstance(payload, dict):
            raise TetherError("INVALID_STREAM", 0, f"unreadable {event} event: {data[:200]!r}")
        if event == "error":
            self.done = True
            raise TetherError.from_problem_dict(payload)
        return self.decode(event, payload)

    def decode(self, event: str, payload: dict[str, Any]) -> list[Any]:
        """The events one SSE event stands for (set done at the last)."""
        raise NotImplementedError

    def finish(self) -> list[Any]:
        tail = self._dispatch() if self._data else []
        if not self.done:
            raise TetherError("INCOMPLETE_STREAM", 0, f"{self.what} ended without {self.end}")
        return tail


class ExecStreamDecoder(SSEDecoder):
    """A streaming exec's events: ExecOutput chunks, then one ExecExit."""

    what = "the exec stream"
    end = "an exit event"

    def __init__(self) -> None:
        super().__init__()
        self._output: list[str] = []

    def decode(self, event: str, payload: dict[str, Any]) -> list[Any]:
        if event in ("stdout", "stderr"):
            chunk = str(payload.get("data", ""))
            self._output.append(chunk)
            return [ExecOutput(event, chunk)]
        if event == "exit":
            self.done = True
            return [ExecExit(ExecResult.from_json(payload, output="".join(self._output)))]
        return []


def read_file(sandbox_id: str, path: str) -> Op[bytes]:
    resp = yield Call("GET", _sandbox_path(sandbox_id, "/files"), params=[("path", path)])
    return resp.content


def write_file(sandbox_id: str, path: str, content: bytes) -> Op[None]:
    """Write content to path (atomically: a failed upload leaves no partial file)."""
    if isinstance(content, str):
        content = content.encode()
    yield Call(
        "PUT",
        _sandbox_path(sandbox_id, "/files"),
        params=[("path", path)],
        content=bytes(content),
        headers={"Content-Type": "application/octet-stream"},
        extra_timeout=float(len(content)) / (1 << 20),  # a second per MiB
    )
    return None


def read_archive(sandbox_id: str, path: str) -> Op[bytes]:
    """The folder at path as a tar archive (members relative to it)."""
    resp = yield Call("GET", _sandbox_path(sandbox_id, "/archive"), params=[("path", path)])
    return resp.content


def write_archive(sandbox_id: str, path: str, tar: bytes) -> Op[None]:
    """Extract a tar archive into the folder at path (whole or not at all)."""
    yield Call(
        "PUT",
        _sandbox_path(sandbox_id, "/archive"),
        params=[("path", path)],
        content=bytes(tar),
        headers={"Content-Type": "application/x-tar"},
        extra_timeout=float(len(tar)) / (1 << 20),
    )
    return None


def list_providers() -> Op[list[ProviderInfo]]:
    resp = yield Call("GET", "/v1/providers")
    return [ProviderInfo.from_json(p) for p in resp.json().get("items") or []]


# -- processes, terminals and watches (docs/processes.md) ------------------

STREAM_IDLE = 30.0
"""Call.extra_timeout of an event stream: the server sends a comment every
15 s on an idle one, so a read that waits longer than the client's timeout
and this has lost the server."""


def _event_stream_call(path: str, params: list[tuple[str, str]]) -> Call:
    """A GET of a long-lived event stream, its reads allowed STREAM_IDLE more."""
    return Call("GET", path, params=params, headers={"Accept": "text/event-stream"}, extra_timeout=STREAM_IDLE)


def _pid(pid: Union[int, str]) -> str:
    """A process's pid (digits) or tag (starts with a letter), as a path segment."""
    if isinstance(pid, bool) or not isinstance(pid, (int, str)):
        raise ValueError(f"a process is its pid (an int) or its tag (a str), got {pid!r}")
    if isinstance(pid, int):
        if pid <= 0:
            raise ValueError(f"a pid is positive, got {pid}")
        return str(pid)
    return _seg(pid)


def _process_path(sandbox_id: str, pid: Union[int, str], suffix: str = "") -> str:
    return _sandbox_path(sandbox_id, f"/processes/{_pid(pid)}{suffix}")


def _size(rows: Any, cols: Any) -> dict[str, int]:
    for name, v in (("rows", rows), ("cols", cols)):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 65535:
            raise ValueError(f"a terminal's {name} is an int 1-65535, got {v!r}")
    return {"rows": rows, "cols": cols}


def start_process(
    sandbox_id: str,
    command: Optional[str] = None,
    *,
    argv: Optional[Iterable[str]] = None,
    env: Optional[Mapping[str, str]] = None,
    cwd: Optional[str] = None,
    tag: Optional[str] = None,
    stdin: bool = False,
    pty: Union[tuple[int, int], Mapping[str, int], None] = None,
    timeout: Optional[int] = None,
) -> Op[Process]:
    """Start command (sh -c) or argv in the background; answers once it runs."""
    if (command is None) == (argv is None):
        raise ValueError("give command (run by sh -c) or argv, one of the two")
    if isinstance(argv, str):
        raise ValueError("argv is a list of strings; give a command line as command")
    body: dict[str, Any] = {"command": command} if command is not None else {"argv": list(argv or [])}
    if env:
        body["env"] = dict(env)
    if cwd:
        body["cwd"] = cwd
    if tag:
        body["tag"] = tag
    if stdin:
        body["stdin"] = True
    if pty is not None:
        body["pty"] = _size(pty["rows"], pty["cols"]) if isinstance(pty, Mapping) else _size(*pty)
    if timeout is not None:
        if int(timeout) < 0:
            raise ValueError("timeout is seconds, 0 or None for none")
        body["timeout_seconds"] = int(timeout)
    resp = yield Call("POST", _sandbox_path(sandbox_id, "/processes"), json=body)
    return Process.from_json(resp.json())


def list_processes(sandbox_id: str) -> Op[list[Process]]:
    resp = yield Call("GET", _sandbox_path(sandbox_id, "/processes"))
    return [Process.from_json(p) for p in resp.json().get("items") or []]


def get_process(sandbox_id: str, pid: Union[int, str], *, wait: Optional[float] = None) -> Op[Process]:
    params = [("wait", _seconds(wait))] if wait else []
    resp = yield Call("GET", _process_path(sandbox_id, pid), params=params, extra_timeout=float(wait or 0))
    return Process.from_json(resp.json())


def wait_process(sandbox_id: str, pid: Union[int, str], *, timeout: float) -> Op[Process]:
    """Long-poll until the process ended or timeout passed; returns it as
    it is then (check ``running``)."""
    deadline = time.monotonic() + max(0.0, timeout)
    while True:
        remaining = deadline - time.monotonic()
        p = yield from get_process(sandbox_id, pid, wait=min(LONG_POLL_CHUNK, remaining) if remaining > 0 else None)
        if not p.running or remaining <= 0:
            return p


def write_stdin(sandbox_id: str, pid: Union[int, str], data: Union[bytes, str], *, close: bool = False) -> Op[None]:
    """Write data to the process's stdin (or its terminal, as typed); with
    close, close its stdin after."""
    if isinstance(data, str):
        data = data.encode()
    yield Call(
        "POST",
        _process_path(sandbox_id, pid, "/stdin"),
        params=[("close", "true")] if close else [],
        content=bytes(data),
        headers={"Content-Type": "application/octet-stream"},
    )
    return None


def signal_process(sandbox_id: str, pid: Union[int, str], signal: Union[str, int] = "TERM") -> Op[None]:
    """Send a signal (TERM, KILL, INT, ... or its number) to the process
    and its process group."""
    name = str(int(signal)) if isinstance(signal, int) else str(signal)
    yield Call("POST", _process_path(sandbox_id, pid, "/signal"), json={"signal": name})
    return None


def resize_process(sandbox_id: str, pid: Union[int, str], rows: int, cols: int) -> Op[None]:
    """Set the size of the process's terminal (it gets SIGWINCH)."""
    yield Call("POST", _process_path(sandbox_id, pid, "/resize"), json=_size(rows, cols))
    return None


def process_output_call(
    sandbox_id: str, pid: Union[int, str], *, from_start: bool = False, binary: bool = False
) -> Call:
    """The request of a process's output; read its answer with ProcessOutputDecoder."""
    params = [("from", "start" if from_start else "now")]
    if binary:
        params.append(("encoding", "base64"))
    return _event_stream_call(_process_path(sandbox_id, pid, "/output"), params)


class ProcessOutputDecoder(SSEDecoder):
    """A process's output events: ProcessStarted, ProcessOutput chunks and
    ProcessDropped, then one ProcessEnded."""

    what = "the output stream"
    end = "an exit event"

    def decode(self, event: str, payload: dict[str, Any]) -> list[Any]:
        if event == "start":
            return [ProcessStarted(int(payload.get("pid") or 0))]
        if event in ("stdout", "stderr", "pty"):
            raw = payload.get("data_base64")
            return [
                ProcessOutput(
                    event,
                    str(payload.get("data") or ""),
                    int(payload.get("offset") or 0),
                    base64.b64decode(raw) if isinstance(raw, str) else None,
                )
            ]
        if event == "dropped":
            return [ProcessDropped(int(payload.get("bytes") or 0), int(payload.get("offset") or 0))]
        if event == "exit":
            self.done = True
            return [ProcessEnded(ProcessExit.from_json(payload))]
        return []


def watch_call(sandbox_id: str, path: str, *, recursive: bool = False) -> Call:
    """The request of a folder's watch; read its answer with WatchDecoder."""
    params = [("path", path)]
    if recursive:
        params.append(("recursive", "true"))
    return _event_stream_call(_sandbox_path(sandbox_id, "/watch"), params)


class WatchDecoder(SSEDecoder):
    """A watch's events: one WatchStarted, then a FileChange per change. It
    has no end of its own: it ends with the client, or with the sandbox (an
    error event, raised)."""

    what = "the watch"
    end = "an error event"

    def decode(self, event: str, payload: dict[str, Any]) -> list[Any]:
        if event == "start":
            return [WatchStarted(str(payload.get("path") or ""), bool(payload.get("recursive")))]
        if event in ("create", "write", "remove", "rename", "chmod"):
            return [FileChange.from_json({"kind": event, **payload})]
        return []


# -- ports and previews (docs/ports.md) -----------------------------------


def _port(port: int) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"port must be an int 1-65535, got {port!r}")
    return port


def port_path(sandbox_id: str, port: int, path: str = "/") -> str:
    """The API's path to path on port in the sandbox (sent with the API key)."""
    return _sandbox_path(sandbox_id, f"/ports/{_port(port)}/{path.lstrip('/')}")


def create_preview(sandbox_id: str, port: int, *, ttl_seconds: Optional[int] = None) -> Op[Preview]:
    """A preview URL of the port: it works without the API key until it
    expires, is revoked or the sandbox ends; its token is shown only now."""
    body: dict[str, Any] = {"port": _port(port)}
    if ttl_seconds is not None:
        body["ttl_seconds"] = int(ttl_seconds)
    resp = yield Call("POST", _sandbox_path(sandbox_id, "/previews"), json=body)
    return Preview.from_json(resp.json())


def list_previews(sandbox_id: str) -> Op[list[Preview]]:
    resp = yield Call("GET", _sandbox_path(sandbox_id, "/previews"))
    return [Preview.from_json(p) for p in resp.json().get("items") or []]


def revoke_preview(sandbox_id: str, preview_id: str) -> Op[Preview]:
    resp = yield Call("DELETE", _sandbox_path(sandbox_id, f"/previews/{_seg(preview_id)}"))
    return Preview.from_json(resp.json())


# -- network rules, policies and secrets -----------------------------------


def _credentials(creds: Iterable[Union[NetworkCredential, Mapping[str, Any]]]) -> list[dict[str, Any]]:
    return [c.to_json() if isinstance(c, NetworkCredential) else dict(c) for c in creds]


def get_network(sandbox_id: str) -> Op[SandboxNetwork]:
    resp = yield Call("GET", _sandbox_path(sandbox_id, "/network"))
    return SandboxNetwork.from_json(resp.json())


def update_network(
    sandbox_id: str,
    allow: Iterable[str],
    *,
    credentials: Optional[Iterable[Union[NetworkCredential, Mapping[str, Any]]]] = None,
    policies: Optional[Iterable[str]] = None,
) -> Op[SandboxNetwork]:
    """Replace an allow-list sandbox's allow list and, if given, its
    credentials and policies: in force within a second."""
    body: dict[str, Any] = {"allow": list(allow)}
    if credentials is not None:
        body["credentials"] = _credentials(credentials)
    if policies is not None:
        body["policies"] = list(policies)
    resp = yield Call("PATCH", _sandbox_path(sandbox_id, "/network"), json=body)
    return SandboxNetwork.from_json(resp.json())


def _policy_path(name: str) -> str:
    return f"/v1/network-policies/{_seg(name)}"


def put_network_policy(
    name: str, allow: Iterable[str], *, credentials: Optional[Iterable[Union[NetworkCredential, Mapping[str, Any]]]] = None
) -> Op[NetworkPolicy]:
    body: dict[str, Any] = {"allow": list(allow)}
    if credentials is not None:
        body["credentials"] = _credentials(credentials)
    resp = yield Call("PUT", _policy_path(name), json=body)
    return NetworkPolicy.from_json(resp.json())


def list_network_policies() -> Op[list[NetworkPolicy]]:
    resp = yield Call("GET", "/v1/network-policies")
    return [NetworkPolicy.from_json(i) for i in resp.json().get("items") or []]


def get_network_policy(name: str) -> Op[NetworkPolicy]:
    resp = yield Call("GET", _policy_path(name))
    return NetworkPolicy.from_json(resp.json())


def delete_network_policy(name: str) -> Op[None]:
    yield Call("DELETE", _policy_path(name))
    return None


def put_secret(name: str, value: str) -> Op[Secret]:
    """Store a secret (its value sealed, never shown again)."""
    resp = yield Call("POST", "/v1/secrets", json={"name": name, "value": value})
    return Secret.from_json(resp.json())


def list_secrets() -> Op[list[Secret]]:
    resp = yield Call("GET", "/v1/secrets")
    return [Secret.from_json(i) for i in resp.json().get("items") or []]


def delete_secret(name: str) -> Op[None]:
    yield Call("DELETE", f"/v1/secrets/{_seg(name)}")
    return None


# -- webhooks ------------------------------------------------------------


def _webhook_path(webhook_id: str, suffix: str = "") -> str:
    return f"/v1/webhooks/{_seg(webhook_id)}{suffix}"


def create_webhook(
    url: str,
    *,
    description: Optional[str] = None,
    states: Optional[Iterable[str]] = None,
    reasons: Optional[Iterable[str]] = None,
    types: Optional[Iterable[str]] = None,
) -> Op[CreatedWebhook]:
    """Register an endpoint; the answer carries its secret, shown once."""
    body: dict[str, Any] = {"url": url}
    if description:
        body["description"] = description
    events: dict[str, Any] = {}
    if states:
        events["states"] = list(states)
    if reasons:
        events["reasons"] = list(reasons)
    if types:
        events["types"] = list(types)
    if events:
        body["events"] = events
    resp = yield Call("POST", "/v1/webhooks", json=body)
    return CreatedWebhook.from_json(resp.json())


def list_webhooks() -> Op[list[Webhook]]:
    resp = yield Call("GET", "/v1/webhooks")
    return [Webhook.from_json(i) for i in resp.json().get("items") or []]


def get_webhook(webhook_id: str) -> Op[Webhook]:
    resp = yield Call("GET", _webhook_path(webhook_id))
    return Webhook.from_json(resp.json())


def delete_webhook(webhook_id: str) -> Op[Webhook]:
    resp = yield Call("DELETE", _webhook_path(webhook_id))
    return Webhook.from_json(resp.json())


def webhook_deliveries(webhook_id: str, *, limit: Optional[int] = None, cursor: Optional[str] = None) -> Op[WebhookDeliveryPage]:
    params = _page_params(None, limit, cursor)
    resp = yield Call("GET", _webhook_path(webhook_id, "/deliveries"), params=params)
    return WebhookDeliveryPage.from_json(resp.json())


def replay_webhook(
    webhook_id: str, *, from_event_id: Optional[int] = None, from_delivery_id: Optional[str] = None
) -> Op[Webhook]:
    """Re-enable the endpoint and deliver again from an event, a delivery,
    or (neither) where deliveries stopped."""
    body: dict[str, Any] = {}
    if from_event_id is not None:
        body["from_event_id"] = int(from_event_id)
    if from_delivery_id is not None:
        body["from_delivery_id"] = from_delivery_id
    resp = yield Call("POST", _webhook_path(webhook_id, "/replay"), json=body)
    return Webhook.from_json(resp.json())

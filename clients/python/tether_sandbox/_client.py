"""Tether and AsyncTether: the whole v1 API over httpx, sync and async.

Both classes share every route through :class:`_API`, whose methods hand an
operation from ``_core`` to ``self._run``. ``Tether._run`` drives it with an
``httpx.Client`` and returns the result; ``AsyncTether._run`` drives it with
an ``httpx.AsyncClient`` and returns a coroutine, so every method of
``AsyncTether`` is awaited. Only the event streams (streaming exec, a
process's output, a watch) and the paginating iterators have a sync and an
async body, and those only move bytes: the requests and the decoding are
shared too.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from typing import Any, AsyncIterator, Awaitable, Iterable, Iterator, Mapping, Optional, TypeVar, Union

import httpx

from . import _core
from ._version import __version__
from ._core import (
    EXEC_MAX,
    Call,
    ExecStreamDecoder,
    Op,
    ProcessOutputDecoder,
    SSEDecoder,
    WatchDecoder,
    check,
    retry_delay,
)
from ._errors import TetherError
from ._models import Event, ExecEvent, ProcessEvent, Sandbox, WatchEvent

__all__ = ["Tether", "AsyncTether", "DEFAULT_TIMEOUT", "settings_from_env", "ssl_context"]

T = TypeVar("T")

DEFAULT_TIMEOUT = 30.0
"""Seconds to wait for an ordinary answer (long-polls and commands get their
own wait on top)."""

DEFAULT_CONNECT_TIMEOUT = 10.0

DEFAULT_MAX_EXEC_TIMEOUT = 3600.0
"""The server's MAX_EXEC_TIMEOUT default, for the read timeout of an exec
with timeout=0."""

_VERSION = __version__
"""Sent as the User-Agent. A constant, not importlib.metadata: reading the
installed distributions lists folders, which an event loop's blocking-call
guard refuses when this module is imported on the loop."""


_NODELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]


class _NoDelayBackend:
    """httpcore's network backend, with TCP_NODELAY on each connection."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def connect_tcp(self, *args: Any, **kwargs: Any) -> Any:
        stream = self._inner.connect_tcp(*args, **kwargs)
        sock = stream.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(*_NODELAY[0])
        return stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def ssl_context() -> Any:
    """httpx's default SSL context (its CA bundle, SSL_CERT_FILE, ...).

    Building one reads and stats files, which blocks: do it off the event
    loop and pass it on as ``verify=``; a client given a ready context does
    no file I/O when it is constructed.
    """
    return httpx.create_ssl_context()


def _sync_transport(verify: Any) -> httpx.HTTPTransport:
    """A transport whose connections set TCP_NODELAY.

    httpcore's sync connections write a request's head and body separately;
    with Nagle's algorithm the body then waits for the server's delayed ACK,
    some 40 ms on every POST and PUT. (asyncio sets TCP_NODELAY by itself.)
    """
    try:
        return httpx.HTTPTransport(verify=verify, socket_options=_NODELAY)  # httpx >= 0.24
    except TypeError:
        transport = httpx.HTTPTransport(verify=verify)
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if backend is not None and hasattr(backend, "connect_tcp"):
            pool._network_backend = _NoDelayBackend(backend)  # type: ignore[union-attr]
        return transport


def settings_from_env(base_url: Optional[str], api_key: Optional[str]) -> tuple[str, str]:
    """base_url and api_key, falling back to TETHER_URL and TETHER_API_KEY."""
    base_url = base_url or os.environ.get("TETHER_URL", "").strip()
    if not base_url:
        raise ValueError(
            "TETHER_URL is not set: set it to the Tether server's address "
            "(e.g. export TETHER_URL=http://127.0.0.1:8080) or pass base_url="
        )
    api_key = api_key or os.environ.get("TETHER_API_KEY", "").strip()
    if not api_key:
        raise ValueError(
            "TETHER_API_KEY is not set: set it to an API key of the Tether server "
            "(tether keys create --tenant NAME) or pass api_key="
        )
    return base_url.rstrip("/"), api_key


def _retry_or_raise(resp: httpx.Response, attempt: int, retries: int) -> float:
    """For an error response (body read): seconds to wait before trying
    again (a rate limit, Postgres unreachable), or raise its TetherError."""
    try:
        check(resp)
    except TetherError as err:
        delay = retry_delay(err, attempt, retries)
        if delay is None:
            raise
        return delay
    raise AssertionError("not an error response")


class _API:
    """The routes, shared by Tether (returns values) and AsyncTether (returns
    awaitables)."""

    def __init__(
        self,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        max_exec_timeout: float = DEFAULT_MAX_EXEC_TIMEOUT,
        retries: int = 3,
        headers: Optional[Mapping[str, str]] = None,
        verify: Any = True,
    ) -> None:
        self.base_url, self._api_key = settings_from_env(base_url, api_key)
        self._verify = verify
        self.retries = max(0, int(retries))
        self.timeout = float(timeout)
        self.connect_timeout = float(connect_timeout)
        self.max_exec_timeout = float(max_exec_timeout)
        self._headers = {
            "Authorization": f"Bearer {self._api_key}",
            "User-Agent": f"tether-sandbox-python/{_VERSION}",
            **dict(headers or {}),
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_url!r})"

    def _timeout_for(self, call: Call) -> httpx.Timeout:
        extra = call.extra_timeout
        if extra == EXEC_MAX:
            extra = self.max_exec_timeout
        return httpx.Timeout(self.timeout, connect=self.connect_timeout, read=self.timeout + float(extra))

    def _request_args(self, call: Call) -> dict[str, Any]:
        args: dict[str, Any] = {"timeout": self._timeout_for(call)}
        if call.params:
            args["params"] = call.params
        if call.json is not None:
            args["json"] = call.json
        if call.content is not None:
            args["content"] = call.content
        if call.headers:
            args["headers"] = call.headers
        return args

    @staticmethod
    def _transport_error(call: Call, err: Exception) -> TetherError:
        code = "TIMEOUT" if isinstance(err, httpx.TimeoutException) else "CONNECTION_FAILED"
        return TetherError(code, 0, f"{call.method} {call.path}: {type(err).__name__}: {err}".rstrip(": "))

    def _run(self, op: Op[T]) -> Any:  # T for Tether, Awaitable[T] for AsyncTether
        raise NotImplementedError

    # -- sandboxes ---------------------------------------------------------

    def create_sandbox(
        self,
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
    ) -> Any:
        """Request a sandbox; it comes back requested (use wait_sandbox).

        id: the sandbox's id, chosen here (new_sandbox_id()) so that it is
        known before the request is sent; the create is idempotent on it.
        from_snapshot: a ready snapshot's id, whose /workspace the sandbox
        starts with. on_end: "snapshot" to take an exit snapshot when the
        sandbox ends by its owner's lease, its TTL or a delete.
        """
        return self._run(
            _core.create_sandbox(
                id=id,
                provider=provider,
                owner=owner,
                labels=labels,
                ttl_seconds=ttl_seconds,
                env=env,
                setup=setup,
                params=params,
                idempotency_key=idempotency_key,
                from_snapshot=from_snapshot,
                on_end=on_end,
            )
        )

    def get_sandbox(self, sandbox_id: str, *, wait: Optional[float] = None, until: Optional[str] = None) -> Any:
        """The sandbox; with wait (seconds), long-polls until it settled
        (until="released": until its resources are gone) or wait passed."""
        return self._run(_core.get_sandbox(sandbox_id, wait=wait, until=until))

    def wait_sandbox(self, sandbox_id: str, *, timeout: float = 300.0, until: str = "settled") -> Any:
        """Long-poll, as many times as needed, until the sandbox settled (or,
        with until="released", is released) or timeout seconds passed."""
        return self._run(_core.wait_sandbox(sandbox_id, timeout=timeout, until=until))

    def list_sandboxes(
        self,
        *,
        state: Union[str, Iterable[str], None] = None,
        owner: Optional[str] = None,
        provider: Optional[str] = None,
        labels: Optional[Mapping[str, str]] = None,
        created_after: Any = None,
        created_before: Any = None,
        released: Optional[bool] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> Any:
        """One page of sandboxes, newest first (SandboxPage)."""
        return self._run(
            _core.list_sandboxes(
                state=state,
                owner=owner,
                provider=provider,
                labels=labels,
                created_after=created_after,
                created_before=created_before,
                released=released,
                limit=limit,
                cursor=cursor,
            )
        )

    def delete_sandbox(self, sandbox_id: str) -> Any:
        """Cancel (requested, creating) or terminate (ready) the sandbox. Idempotent."""
        return self._run(_core.delete_sandbox(sandbox_id))

    def create_snapshot(self, sandbox_id: str, *, wait: Optional[float] = None) -> Any:
        """Snapshot a ready or paused sandbox's /workspace (Snapshot, creating;
        with wait seconds, as it is once settled or when wait passed)."""
        return self._run(_core.create_snapshot(sandbox_id, wait=wait))

    def get_snapshot(self, snapshot_id: str, *, wait: Optional[float] = None) -> Any:
        """The snapshot; with wait (seconds), once it is no longer creating."""
        return self._run(_core.get_snapshot(snapshot_id, wait=wait))

    def list_snapshots(
        self, *, sandbox_id: Optional[str] = None, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> Any:
        """One page of the tenant's snapshots, newest first (SnapshotPage)."""
        return self._run(_core.list_snapshots(sandbox_id=sandbox_id, limit=limit, cursor=cursor))

    def delete_snapshot(self, snapshot_id: str) -> Any:
        """Delete the snapshot. Idempotent."""
        return self._run(_core.delete_snapshot(snapshot_id))

    def renew_sandbox(self, sandbox_id: str, ttl_seconds: int) -> Any:
        """Move the sandbox's deadline to now + ttl_seconds (RenewedSandbox)."""
        return self._run(_core.renew_sandbox(sandbox_id, ttl_seconds))

    def pause_sandbox(self, sandbox_id: str, *, wait: Optional[float] = None) -> Any:
        """Pause a ready sandbox: its processes stop, keeping their memory and
        files; exec and files on it are refused (409) until it is resumed.
        With wait (seconds), blocks until it is paused (or the pause failed)
        or wait passed. Idempotent."""
        return self._run(_core.pause_sandbox(sandbox_id, wait=wait))

    def resume_sandbox(self, sandbox_id: str, *, wait: Optional[float] = None) -> Any:
        """Resume a paused sandbox, its processes as they were; with wait
        (seconds), blocks until it is ready again (or the resume failed) or
        wait passed. Idempotent."""
        return self._run(_core.resume_sandbox(sandbox_id, wait=wait))

    def transfer_sandbox(self, sandbox_id: str, owner: str) -> Any:
        """Make owner the sandbox's owner (PUT /v1/sandboxes/{id}/owner)."""
        return self._run(_core.transfer_sandbox(sandbox_id, owner))

    def sandbox_events(
        self, sandbox_id: str, *, after: Optional[int] = None, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> Any:
        """One page of the sandbox's history (EventPage)."""
        return self._run(_core.sandbox_events(sandbox_id, after=after, limit=limit, cursor=cursor))

    def events(self, *, after: Optional[int] = None, limit: Optional[int] = None, cursor: Optional[str] = None) -> Any:
        """One page of the tenant's event feed, after the event id ``after``."""
        return self._run(_core.events(after=after, limit=limit, cursor=cursor))

    # -- owners ----------------------------------------------------------

    def renew_owner_lease(self, owner: str, ttl_seconds: int) -> Any:
        """Heartbeat: the owner is alive for ttl_seconds more (OwnerLease)."""
        return self._run(_core.renew_owner_lease(owner, ttl_seconds))

    def end_owner(self, owner: str) -> Any:
        """End the owner's lease and all its live sandboxes (OwnerRelease)."""
        return self._run(_core.end_owner(owner))

    # -- data plane ------------------------------------------------------

    def exec(
        self,
        sandbox_id: str,
        command: str,
        *,
        timeout: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        workdir: Optional[str] = None,
    ) -> Any:
        """Run sh -c command and wait for it (ExecResult). timeout: None is
        the server's default (60 s), 0 its maximum, else seconds."""
        return self._run(_core.exec_command(sandbox_id, command, timeout=timeout, env=env, workdir=workdir))

    def read_file(self, sandbox_id: str, path: str) -> Any:
        """The bytes of the file at path."""
        return self._run(_core.read_file(sandbox_id, path))

    def write_file(self, sandbox_id: str, path: str, content: Union[bytes, str]) -> Any:
        """Replace the file at path with content (atomically)."""
        return self._run(_core.write_file(sandbox_id, path, content))  # type: ignore[arg-type]

    def read_archive(self, sandbox_id: str, path: str) -> Any:
        """The folder at path as the bytes of a tar archive."""
        return self._run(_core.read_archive(sandbox_id, path))

    def write_archive(self, sandbox_id: str, path: str, tar: bytes) -> Any:
        """Extract the tar archive into the folder at path (made if missing)."""
        return self._run(_core.write_archive(sandbox_id, path, tar))

    def providers(self) -> Any:
        """The server's enabled providers (list[ProviderInfo])."""
        return self._run(_core.list_providers())

    # -- processes, terminals and watches (docs/processes.md) -------------

    def start_process(
        self,
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
    ) -> Any:
        """Start a background process (Process), answered once it runs:
        command (run by sh -c) or argv (run as it is), one of the two.

        env: on top of the sandbox's; cwd: an absolute path; tag: a name to
        select it by in place of its pid; stdin: keep a pipe to its stdin
        for write_stdin; pty: (rows, cols) runs it in a terminal (its
        output is then "pty" events); timeout: seconds before it is
        killed, None for none. It outlives this client and ends with the
        sandbox.
        """
        return self._run(
            _core.start_process(
                sandbox_id, command, argv=argv, env=env, cwd=cwd, tag=tag, stdin=stdin, pty=pty, timeout=timeout
            )
        )

    def list_processes(self, sandbox_id: str) -> Any:
        """The sandbox's processes, running and recently ended, oldest first (list[Process])."""
        return self._run(_core.list_processes(sandbox_id))

    def get_process(self, sandbox_id: str, pid: Union[int, str], *, wait: Optional[float] = None) -> Any:
        """One process, by pid or tag (Process); with wait (seconds), once
        it ended or wait passed. 404 PROCESS_NOT_FOUND: none such (or it
        ended more than a minute ago)."""
        return self._run(_core.get_process(sandbox_id, pid, wait=wait))

    def wait_process(self, sandbox_id: str, pid: Union[int, str], *, timeout: float = 300.0) -> Any:
        """Long-poll, as many times as needed, until the process ended or
        timeout seconds passed; the Process as it is then (its exit, or
        running still)."""
        return self._run(_core.wait_process(sandbox_id, pid, timeout=timeout))

    def write_stdin(self, sandbox_id: str, pid: Union[int, str], data: Union[bytes, str], *, close: bool = False) -> Any:
        """Write data to the process's stdin (one started with stdin=True)
        or, for a terminal, type it; close=True closes stdin after. 409
        PROCESS_STATE_CONFLICT: no stdin, stdin closed, or the process ended."""
        return self._run(_core.write_stdin(sandbox_id, pid, data, close=close))

    def close_stdin(self, sandbox_id: str, pid: Union[int, str]) -> Any:
        """Close the process's stdin: it reads end of file (a terminal
        takes "\\x04", ^D, through write_stdin instead)."""
        return self._run(_core.write_stdin(sandbox_id, pid, b"", close=True))

    def signal_process(self, sandbox_id: str, pid: Union[int, str], signal: Union[str, int] = "TERM") -> Any:
        """Send a signal (TERM, KILL, INT, HUP, ... or its number) to the
        process and its process group."""
        return self._run(_core.signal_process(sandbox_id, pid, signal))

    def resize_process(self, sandbox_id: str, pid: Union[int, str], rows: int, cols: int) -> Any:
        """Set the size of the process's terminal; the program gets SIGWINCH."""
        return self._run(_core.resize_process(sandbox_id, pid, rows, cols))

    # -- ports and previews (docs/ports.md) -------------------------------

    def port_url(self, sandbox_id: str, port: int, path: str = "/") -> str:
        """The URL of path on port in the sandbox, through the API: send it
        the API key (the client's headers) with any HTTP or WebSocket
        client. 502 PORT_UNREACHABLE: nothing listens there."""
        return self.base_url.rstrip("/") + _core.port_path(sandbox_id, port, path)

    def create_preview(self, sandbox_id: str, port: int, *, ttl_seconds: Optional[int] = None) -> Any:
        """A preview URL of the port that needs no API key (Preview, with
        url and token, shown this once), until ttl_seconds (the server's
        PREVIEW_TTL by default) pass, it is revoked, or the sandbox ends."""
        return self._run(_core.create_preview(sandbox_id, port, ttl_seconds=ttl_seconds))

    def list_previews(self, sandbox_id: str) -> Any:
        """The sandbox's previews, oldest first, without tokens (list[Preview])."""
        return self._run(_core.list_previews(sandbox_id))

    def revoke_preview(self, sandbox_id: str, preview_id: str) -> Any:
        """Revoke the preview at once (the Preview, revoked_at set)."""
        return self._run(_core.revoke_preview(sandbox_id, preview_id))

    # -- network rules, policies and secrets (docs/providers.md) ----------

    def get_network(self, sandbox_id: str) -> Any:
        """The sandbox's network rules (SandboxNetwork): secrets by name only."""
        return self._run(_core.get_network(sandbox_id))

    def update_network(
        self,
        sandbox_id: str,
        allow: Iterable[str],
        *,
        credentials: Optional[Iterable[Any]] = None,
        policies: Optional[Iterable[str]] = None,
    ) -> Any:
        """Replace an allow-list sandbox's allow list and, if given, its
        credentials (NetworkCredential or dicts) and attached policies; in
        force within a second, on every replica (SandboxNetwork)."""
        return self._run(_core.update_network(sandbox_id, allow, credentials=credentials, policies=policies))

    def put_network_policy(self, name: str, allow: Iterable[str], *, credentials: Optional[Iterable[Any]] = None) -> Any:
        """Define (or replace) the tenant's network policy name (NetworkPolicy);
        sandboxes attach it with params.policies or update_network."""
        return self._run(_core.put_network_policy(name, allow, credentials=credentials))

    def list_network_policies(self) -> Any:
        """The tenant's network policies by name (list[NetworkPolicy])."""
        return self._run(_core.list_network_policies())

    def get_network_policy(self, name: str) -> Any:
        """One network policy (NetworkPolicy)."""
        return self._run(_core.get_network_policy(name))

    def delete_network_policy(self, name: str) -> Any:
        """Delete the policy: the sandboxes attached lose its rules."""
        return self._run(_core.delete_network_policy(name))

    def put_secret(self, name: str, value: str) -> Any:
        """Store the tenant's secret name (Secret, without the value, which
        Tether never shows); the same name again replaces the value."""
        return self._run(_core.put_secret(name, value))

    def list_secrets(self) -> Any:
        """The tenant's secrets by name (list[Secret])."""
        return self._run(_core.list_secrets())

    def delete_secret(self, name: str) -> Any:
        """Delete the secret: credentials naming it stop working."""
        return self._run(_core.delete_secret(name))

    # -- webhooks (docs/webhooks.md; the API key needs manage_keys) -------

    def create_webhook(
        self,
        url: str,
        *,
        description: Optional[str] = None,
        states: Optional[Iterable[str]] = None,
        reasons: Optional[Iterable[str]] = None,
        types: Optional[Iterable[str]] = None,
    ) -> Any:
        """Register an endpoint for the tenant's events (CreatedWebhook, with
        the signing secret, shown this once). states, reasons and types
        (sandbox.state_changed, sandbox.released) filter the events; none:
        every event."""
        return self._run(_core.create_webhook(url, description=description, states=states, reasons=reasons, types=types))

    def list_webhooks(self) -> Any:
        """The tenant's endpoints, oldest first (list[Webhook])."""
        return self._run(_core.list_webhooks())

    def get_webhook(self, webhook_id: str) -> Any:
        """One endpoint (Webhook): its state (failing once retries ran out)."""
        return self._run(_core.get_webhook(webhook_id))

    def delete_webhook(self, webhook_id: str) -> Any:
        """Delete the endpoint and its history (the Webhook it was)."""
        return self._run(_core.delete_webhook(webhook_id))

    def webhook_deliveries(self, webhook_id: str, *, limit: Optional[int] = None, cursor: Optional[str] = None) -> Any:
        """One page of the endpoint's deliveries, newest first (WebhookDeliveryPage)."""
        return self._run(_core.webhook_deliveries(webhook_id, limit=limit, cursor=cursor))

    def replay_webhook(
        self, webhook_id: str, *, from_event_id: Optional[int] = None, from_delivery_id: Optional[str] = None
    ) -> Any:
        """Re-enable the endpoint and deliver again from an event id, a
        delivery's first event, or (neither) where it stopped (Webhook)."""
        return self._run(_core.replay_webhook(webhook_id, from_event_id=from_event_id, from_delivery_id=from_delivery_id))


class Tether(_API):
    """Synchronous client. Every call is bounded by a timeout: ``timeout``
    seconds for an answer, plus the wait of a long-poll or the timeout of a
    command.

        with Tether() as t:   # TETHER_URL, TETHER_API_KEY
            sb = t.create_sandbox(provider="local")
            sb = t.wait_sandbox(sb.id)
            print(t.exec(sb.id, "echo hi").output)
            t.delete_sandbox(sb.id)
    """

    def __init__(
        self,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        http_client: Optional[httpx.Client] = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(base_url, api_key, **kwargs)
        self._http = http_client or httpx.Client(
            base_url=self.base_url,
            headers=self._headers,
            timeout=httpx.Timeout(self.timeout, connect=self.connect_timeout),
            verify=self._verify,
            transport=_sync_transport(self._verify),
        )
        if http_client is not None:
            self._http.headers.update(self._headers)

    def _send(self, call: Call) -> httpx.Response:
        attempt = 0
        while True:
            try:
                resp = self._http.request(call.method, call.path, **self._request_args(call))
            except httpx.TransportError as err:
                raise self._transport_error(call, err) from err
            if resp.status_code < 300:
                return resp
            time.sleep(_retry_or_raise(resp, attempt, self.retries))
            attempt += 1

    def _run(self, op: Op[T]) -> T:
        try:
            call = next(op)
            while True:
                call = op.send(self._send(call))
        except StopIteration as stop:
            return stop.value
        finally:
            op.close()

    def exec_stream(
        self,
        sandbox_id: str,
        command: str,
        *,
        timeout: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        workdir: Optional[str] = None,
    ) -> Iterator[ExecEvent]:
        """Run a command, yielding ExecOutput chunks as they come, then one
        ExecExit. Leaving the loop early disconnects, which ends the command."""
        call = _core.exec_stream_call(sandbox_id, command, timeout=timeout, env=env, workdir=workdir)
        return self._stream(call, ExecStreamDecoder())

    def process_output(
        self, sandbox_id: str, pid: Union[int, str], *, from_start: bool = False, binary: bool = False
    ) -> Iterator[ProcessEvent]:
        """Follow a process's output: ProcessStarted, then ProcessOutput
        chunks (stream stdout, stderr, or pty for a terminal) and
        ProcessDropped as they come, then one ProcessEnded with its exit.

        from_start: from the start of what the sandbox keeps of it, not
        from now. binary: chunks as bytes (data_bytes), exactly as written.
        Leaving the loop detaches; the process goes on. Any number of
        clients may follow one process at once.
        """
        return self._stream(_core.process_output_call(sandbox_id, pid, from_start=from_start, binary=binary), ProcessOutputDecoder())

    def watch(self, sandbox_id: str, path: str = "/workspace", *, recursive: bool = False) -> Iterator[WatchEvent]:
        """Follow what changes under the folder at path: one WatchStarted
        once the watch is armed (every change after it is seen), then a
        FileChange per change (kind create, write, remove, rename or chmod;
        path relative to the folder), until the loop is left or the
        sandbox ends (its TetherError is raised)."""
        return self._stream(_core.watch_call(sandbox_id, path, recursive=recursive), WatchDecoder())

    def _stream(self, call: Call, decoder: SSEDecoder) -> Iterator[Any]:
        """The events of an event stream, the request retried as any is
        until the stream begins."""
        attempt = 0
        try:
            while True:
                with self._http.stream(call.method, call.path, **self._request_args(call)) as resp:
                    if resp.status_code < 300:
                        for line in resp.iter_lines():
                            yield from decoder.feed(line)
                            if decoder.done:
                                return
                        yield from decoder.finish()
                        return
                    resp.read()
                    delay = _retry_or_raise(resp, attempt, self.retries)
                time.sleep(delay)
                attempt += 1
        except httpx.TransportError as err:
            raise self._transport_error(call, err) from err

    def iter_sandboxes(self, **filters: Any) -> Iterator[Sandbox]:
        """Every sandbox matching the list_sandboxes filters, page by page."""
        cursor = filters.pop("cursor", None)
        while True:
            page = self._run(_core.list_sandboxes(cursor=cursor, **filters))
            yield from page.items
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def iter_events(self, sandbox_id: Optional[str] = None, *, after: Optional[int] = None, limit: int = 500) -> Iterator[Event]:
        """The events after ``after``: of one sandbox, or the tenant's feed."""
        while True:
            op = _core.sandbox_events(sandbox_id, after=after, limit=limit) if sandbox_id else _core.events(after=after, limit=limit)
            page = self._run(op)
            yield from page.items
            if not page.items or not page.next_cursor:
                return
            after = page.items[-1].id

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Tether":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncTether(_API):
    """Asynchronous client: the methods of Tether, awaited. Cancelling the
    awaiting task cancels the request (a long-poll, a command) at once.

        async with AsyncTether() as t:
            sb = await t.wait_sandbox((await t.create_sandbox()).id)
            async for ev in t.exec_stream(sb.id, "make test"):
                ...
    """

    def __init__(
        self,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        http_client: Optional[httpx.AsyncClient] = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(base_url, api_key, **kwargs)
        self._http = http_client or httpx.AsyncClient(
            base_url=self.base_url,
            headers=self._headers,
            timeout=httpx.Timeout(self.timeout, connect=self.connect_timeout),
            verify=self._verify,
        )
        if http_client is not None:
            self._http.headers.update(self._headers)

    async def _send(self, call: Call) -> httpx.Response:
        attempt = 0
        while True:
            try:
                resp = await self._http.request(call.method, call.path, **self._request_args(call))
            except httpx.TransportError as err:
                raise self._transport_error(call, err) from err
            if resp.status_code < 300:
                return resp
            await asyncio.sleep(_retry_or_raise(resp, attempt, self.retries))
            attempt += 1

    def _run(self, op: Op[T]) -> Awaitable[T]:
        return self._drive(op)

    async def _drive(self, op: Op[T]) -> T:
        try:
            call = next(op)
            while True:
                call = op.send(await self._send(call))
        except StopIteration as stop:
            return stop.value
        finally:
            op.close()

    async def exec_stream(
        self,
        sandbox_id: str,
        command: str,
        *,
        timeout: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        workdir: Optional[str] = None,
    ) -> AsyncIterator[ExecEvent]:
        """Run a command, yielding ExecOutput chunks as they come, then one
        ExecExit. Cancelling or leaving the loop disconnects, which ends the
        command."""
        call = _core.exec_stream_call(sandbox_id, command, timeout=timeout, env=env, workdir=workdir)
        async for event in self._stream(call, ExecStreamDecoder()):
            yield event

    async def process_output(
        self, sandbox_id: str, pid: Union[int, str], *, from_start: bool = False, binary: bool = False
    ) -> AsyncIterator[ProcessEvent]:
        """Follow a process's output, as Tether.process_output does.
        Cancelling or leaving the loop detaches; the process goes on."""
        call = _core.process_output_call(sandbox_id, pid, from_start=from_start, binary=binary)
        async for event in self._stream(call, ProcessOutputDecoder()):
            yield event

    async def watch(self, sandbox_id: str, path: str = "/workspace", *, recursive: bool = False) -> AsyncIterator[WatchEvent]:
        """Follow what changes under the folder at path, as Tether.watch does."""
        async for event in self._stream(_core.watch_call(sandbox_id, path, recursive=recursive), WatchDecoder()):
            yield event

    async def _stream(self, call: Call, decoder: SSEDecoder) -> AsyncIterator[Any]:
        """The events of an event stream, the request retried as any is
        until the stream begins."""
        attempt = 0
        try:
            while True:
                async with self._http.stream(call.method, call.path, **self._request_args(call)) as resp:
                    if resp.status_code < 300:
                        async for line in resp.aiter_lines():
                            for event in decoder.feed(line):
                                yield event
                            if decoder.done:
                                return
                        for event in decoder.finish():
                            yield event
                        return
                    await resp.aread()
                    delay = _retry_or_raise(resp, attempt, self.retries)
                await asyncio.sleep(delay)
                attempt += 1
        except httpx.TransportError as err:
            raise self._transport_error(call, err) from err

    async def iter_sandboxes(self, **filters: Any) -> AsyncIterator[Sandbox]:
        """Every sandbox matching the list_sandboxes filters, page by page."""
        cursor = filters.pop("cursor", None)
        while True:
            page = await self._run(_core.list_sandboxes(cursor=cursor, **filters))
            for sb in page.items:
                yield sb
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def iter_events(
        self, sandbox_id: Optional[str] = None, *, after: Optional[int] = None, limit: int = 500
    ) -> AsyncIterator[Event]:
        """The events after ``after``: of one sandbox, or the tenant's feed."""
        while True:
            op = _core.sandbox_events(sandbox_id, after=after, limit=limit) if sandbox_id else _core.events(after=after, limit=limit)
            page = await self._run(op)
            for ev in page.items:
                yield ev
            if not page.items or not page.next_cursor:
                return
            after = page.items[-1].id

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncTether":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

"""TetherProvider and TetherSandbox: Tether as a dcode (deepagents-code)
sandbox provider and a deepagents sandbox backend.

The provider owns its sandboxes through an *owner lease*: one owner name per
provider (hostname-pid-random), whose lease is heartbeated every third of
its TTL by an asyncio task (when used from async code) or a daemon thread
(when used from sync code). Nothing relies on exit hooks: if the process dies
in any way (SIGKILL, OOM, a crash, SIGTERM), the heartbeats stop and Tether
ends the owner's sandboxes within the lease plus one janitor interval.
``close()``/``aclose()`` end the owner at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import re
import socket
import string
import threading
import uuid
from typing import Any, Optional, Sequence

from ._client import AsyncTether, Tether, settings_from_env
from ._compat import (
    BaseSandbox,
    ExecuteResponse,
    FileDownloadResponse,
    FileUploadResponse,
    SandboxInstallHint,
    SandboxNotFoundError,
    SandboxProvider,
    SandboxProviderMetadata,
)
from ._errors import TetherError
from ._models import ExecResult, Sandbox

__all__ = ["TetherProvider", "TetherSandbox", "TetherSandboxNotFoundError", "default_owner_name", "FILE_ERRORS"]

log = logging.getLogger("tether_sandbox")

DEFAULT_OWNER_TTL = 30
"""Seconds of the owner lease; heartbeats go every third of it."""

DEFAULT_READY_TIMEOUT = 300.0
"""Seconds get_or_create waits for a sandbox to become ready."""

DEFAULT_MAX_CONCURRENCY = 8
"""File transfers in flight at once in aupload_files/adownload_files."""

FILE_ERRORS = {
    "FILE_NOT_FOUND": "file_not_found",
    "PERMISSION_DENIED": "permission_denied",
    "IS_DIRECTORY": "is_directory",
    "INVALID_PATH": "invalid_path",
}
"""Tether's file error codes and deepagents' FileOperationError literals."""

_CREATE_ARGS = ("provider", "labels", "env", "setup", "ttl_seconds", "params")
"""get_or_create keyword arguments that go into the create request."""


class TetherSandboxNotFoundError(TetherError, SandboxNotFoundError):
    """get_or_create(sandbox_id=...) named a sandbox that does not exist or has
    ended; a TetherError (code, status, state) and dcode's SandboxNotFoundError."""


def default_owner_name() -> str:
    """hostname-pid-random: unique per process (and per provider)."""
    host = re.sub(r"[^A-Za-z0-9._-]+", "-", socket.gethostname()).strip("-._")[:60] or "host"
    suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=8))
    return f"{host}-{os.getpid()}-{suffix}"


class _Clients:
    """The provider's HTTP clients: one sync client (and a short-timeout one
    for heartbeats and cleanups), and one async client per event loop."""

    def __init__(self, base_url: str, api_key: str, timeout: float, quick_timeout: float) -> None:
        self._args = (base_url, api_key)
        self._timeout = timeout
        self._quick_timeout = quick_timeout
        self._lock = threading.Lock()
        self._sync: Optional[Tether] = None
        self._quick: Optional[Tether] = None
        self._async: Optional[AsyncTether] = None
        self._async_loop: Optional[asyncio.AbstractEventLoop] = None

    @property
    def sync(self) -> Tether:
        with self._lock:
            if self._sync is None:
                self._sync = Tether(*self._args, timeout=self._timeout)
            return self._sync

    @property
    def quick(self) -> Tether:
        with self._lock:
            if self._quick is None:
                self._quick = Tether(*self._args, timeout=self._quick_timeout, connect_timeout=self._quick_timeout)
            return self._quick

    def aio(self) -> AsyncTether:
        """The async client of the running loop (made on first use)."""
        loop = asyncio.get_running_loop()
        if self._async is None or self._async_loop is not loop:
            # An httpx.AsyncClient is bound to the loop it first ran on; a
            # new loop gets a new client (the old loop's one went with it).
            self._async = AsyncTether(*self._args, timeout=self._timeout)
            self._async_loop = loop
        return self._async

    def close(self) -> None:
        with self._lock:
            sync, quick, self._sync, self._quick = self._sync, self._quick, None, None
        for client in (sync, quick):
            if client is not None:
                client.close()
        aclient, loop = self._async, self._async_loop
        self._async = self._async_loop = None
        if aclient is not None and loop is not None and not loop.is_closed():
            try:
                if loop.is_running():
                    asyncio.run_coroutine_threadsafe(aclient.aclose(), loop)
                else:
                    loop.run_until_complete(aclient.aclose())
            except RuntimeError:
                pass

    async def aclose(self) -> None:
        aclient, loop = self._async, self._async_loop
        self._async = self._async_loop = None
        if aclient is not None and loop is asyncio.get_running_loop():
            await aclient.aclose()
        with self._lock:
            sync, quick, self._sync, self._quick = self._sync, self._quick, None, None
        for client in (sync, quick):
            if client is not None:
                client.close()  # closes sockets only: no network round trip


class _OwnerLease:
    """This provider's owner lease and the heartbeat that keeps it alive."""

    def __init__(self, clients: _Clients, owner: str, ttl: int) -> None:
        self.clients = clients
        self.owner = owner
        self.ttl = ttl
        self.interval = max(0.2, ttl / 3)
        self.beat_timeout = max(0.5, ttl / 2)
        self.named = False  # a create or transfer named the owner
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._task: Optional[asyncio.Task[None]] = None
        self._task_loop: Optional[asyncio.AbstractEventLoop] = None

    def _beating(self) -> bool:
        if self._thread is not None and self._thread.is_alive():
            return True
        loop = self._task_loop
        return self._task is not None and not self._task.done() and loop is not None and loop.is_running()

    # -- sync: a daemon thread -------------------------------------------

    def start(self) -> None:
        """Renew the lease now (with our TTL, not the server's default) and
        make sure a heartbeat runs."""
        self.clients.sync.renew_owner_lease(self.owner, self.ttl)
        self.keep_beating()

    def keep_beating(self) -> None:
        with self._lock:
            if self.named and not self._stop.is_set() and not self._beating():
                self._thread = threading.Thread(target=self._beat_thread, name=f"tether-lease-{self.owner}", daemon=True)
                self._thread.start()

    def _beat_thread(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.clients.quick.renew_owner_lease(self.owner, self.ttl)
            except Exception as err:  # transient: the next beat is well within the lease
                log.debug("owner %s: heartbeat failed: %s", self.owner, err)

    # -- async: an asyncio task ------------------------------------------

    async def astart(self) -> None:
        await self.clients.aio().renew_owner_lease(self.owner, self.ttl)
        self.akeep_beating()

    def akeep_beating(self) -> None:
        if self.named and not self._stop.is_set() and not self._beating():
            loop = asyncio.get_running_loop()
            self._task = loop.create_task(self._beat_task(), name=f"tether-lease-{self.owner}")
            self._task_loop = loop

    async def _beat_task(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await asyncio.wait_for(self.clients.aio().renew_owner_lease(self.owner, self.ttl), self.beat_timeout)
            except asyncio.CancelledError:
                raise
            except Exception as err:
                log.debug("owner %s: heartbeat failed: %s", self.owner, err)

    def stop(self, *, join: bool = True) -> None:
        self._stop.set()
        task, loop = self._task, self._task_loop
        if task is not None and loop is not None and not task.done() and not loop.is_closed():
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                task.cancel()
            else:
                loop.call_soon_threadsafe(task.cancel)
        thread = self._thread
        if join and thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self.beat_timeout + 1)  # it wakes at once unless mid-request


class TetherProvider(SandboxProvider):
    """Tether as a dcode sandbox provider (``dcode --sandbox tether``).

    With no arguments it reads TETHER_URL and TETHER_API_KEY (both required),
    and optionally TETHER_PROVIDER (the Tether provider to create with; the
    server's default otherwise) and TETHER_OWNER_TTL (seconds, default 30).

    get_or_create keyword arguments (dcode's ``[sandboxes.providers.tether.params]``):
    provider, labels, env, setup, ttl_seconds, params (provider-specific
    options, e.g. {"network": "none"}), and timeout (seconds to wait for
    ready).
    """

    def __init__(
        self,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        provider: Optional[str] = None,
        owner: Optional[str] = None,
        owner_ttl: Optional[int] = None,
        labels: Optional[dict[str, str]] = None,
        ready_timeout: float = DEFAULT_READY_TIMEOUT,
        timeout: float = 30.0,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    ) -> None:
        base_url, api_key = settings_from_env(base_url, api_key)
        self.base_url = base_url
        self.provider = provider or os.environ.get("TETHER_PROVIDER") or None
        if owner_ttl is None:
            raw = os.environ.get("TETHER_OWNER_TTL", "").strip()
            try:
                owner_ttl = int(raw) if raw else DEFAULT_OWNER_TTL
            except ValueError:
                raise ValueError(f"TETHER_OWNER_TTL must be a whole number of seconds, not {raw!r}") from None
        if owner_ttl < 1:
            raise ValueError("owner_ttl must be at least 1 second")
        self.owner = owner or default_owner_name()
        self.owner_ttl = int(owner_ttl)
        self.labels = dict(labels or {})
        self.ready_timeout = float(ready_timeout)
        self.max_concurrency = max(1, int(max_concurrency))
        self._clients = _Clients(base_url, api_key, float(timeout), min(float(timeout), max(1.0, self.owner_ttl / 2)))
        self._lease = _OwnerLease(self._clients, self.owner, self.owner_ttl)
        self._cleanups: set[asyncio.Task[None]] = set()
        self._closed = False

    def __repr__(self) -> str:
        return f"TetherProvider({self.base_url!r}, owner={self.owner!r})"

    @property
    def metadata(self) -> Any:
        return SandboxProviderMetadata(
            name="tether",
            working_dir="/workspace",
            install=SandboxInstallHint(kind="package", name="tether-sandbox"),
            supports_sandbox_id=True,
            supports_snapshot_name=False,
            backend_module=None,
        )

    @property
    def client(self) -> Tether:
        """The provider's sync client (for the rest of the API)."""
        return self._clients.sync

    def aclient(self) -> AsyncTether:
        """The provider's async client for the running loop."""
        return self._clients.aio()

    # -- the create request ------------------------------------------------

    def _create_args(self, kwargs: dict[str, Any]) -> tuple[dict[str, Any], float]:
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        ready_timeout = float(kwargs.pop("timeout", self.ready_timeout))
        unknown = sorted(set(kwargs) - set(_CREATE_ARGS))
        if unknown:
            raise TypeError(
                f"TetherProvider.get_or_create got unsupported arguments {unknown}; "
                f"it takes {', '.join(_CREATE_ARGS)} and timeout"
            )
        body = {k: kwargs[k] for k in _CREATE_ARGS if k in kwargs}
        body.setdefault("provider", self.provider)
        if self.labels or body.get("labels"):
            body["labels"] = {**self.labels, **dict(body.get("labels") or {})}
        body["owner"] = self.owner
        return body, ready_timeout

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this TetherProvider is closed")

    @staticmethod
    def _not_ready(sb: Sandbox, ready_timeout: float) -> TetherError:
        if sb.pending:
            return TetherError(
                "TIMEOUT", 0, f"sandbox {sb.id} is still {sb.state} after {ready_timeout:g}s; it was deleted", sb.state
            )
        why = "; ".join(x for x in (sb.reason, sb.error) if x)
        return TetherError(
            "SANDBOX_STATE_CONFLICT", 409, f"sandbox {sb.id} is {sb.state}" + (f": {why}" if why else ""), sb.state
        )

    # -- sync --------------------------------------------------------------

    def get_or_create(self, *, sandbox_id: Optional[str] = None, **kwargs: Any) -> "TetherSandbox":
        """Create a sandbox owned by this provider and wait until it is ready,
        or, with sandbox_id, reattach to a live sandbox and adopt it.

        Blocks the calling thread; from async code use aget_or_create.
        """
        self._check_open()
        body, ready_timeout = self._create_args(kwargs)
        if sandbox_id:
            return self._attach(sandbox_id, ready_timeout)
        key = uuid.uuid4().hex
        t = self._clients.sync
        sb: Optional[Sandbox] = None
        self._lease.named = True
        try:
            sb = t.create_sandbox(idempotency_key=key, **body)
            self._lease.start()
            sb = t.wait_sandbox(sb.id, timeout=ready_timeout)
        except BaseException as err:
            if sb is not None or not _refused(err):
                self._end_requested_sync(sb.id if sb else None, key, body)
            raise
        if not sb.ready:
            err = self._not_ready(sb, ready_timeout)
            if sb.pending:
                self._end_requested_sync(sb.id, key, body)
            raise err
        return TetherSandbox(self, sb)

    def _end_requested_sync(self, sandbox_id: Optional[str], key: str, body: dict[str, Any]) -> None:
        """End a sandbox this provider requested but will not hand out."""
        t = self._clients.quick
        try:
            if sandbox_id is None:
                # The create may or may not have reached the server: replaying
                # it with the same Idempotency-Key returns what it made.
                sandbox_id = t.create_sandbox(idempotency_key=key, **body).id
            t.delete_sandbox(sandbox_id)
        except Exception as err:
            log.warning("could not end sandbox %s (its owner lease will): %s", sandbox_id or "being created", err)

    def _attach(self, sandbox_id: str, ready_timeout: float) -> "TetherSandbox":
        t = self._clients.sync
        try:
            sb = t.wait_sandbox(sandbox_id, timeout=ready_timeout)
        except TetherError as err:
            raise self._attach_error(sandbox_id, err) from err
        if not sb.ready:
            raise self._unattachable(sb, ready_timeout)
        self._lease.named = True
        try:
            sb = t.transfer_sandbox(sandbox_id, self.owner)
        except TetherError as err:
            raise self._attach_error(sandbox_id, err) from err
        self._lease.start()
        return TetherSandbox(self, sb)

    @staticmethod
    def _unattachable(sb: Sandbox, ready_timeout: float) -> TetherError:
        if sb.pending:
            return TetherError("TIMEOUT", 0, f"sandbox {sb.id} is still {sb.state} after {ready_timeout:g}s", sb.state)
        why = "; ".join(x for x in (sb.reason, sb.error) if x)
        detail = f"sandbox {sb.id} is {sb.state}" + (f" ({why})" if why else "") + ": it cannot be reattached"
        return TetherSandboxNotFoundError("SANDBOX_STATE_CONFLICT", 409, detail, sb.state)

    @staticmethod
    def _attach_error(sandbox_id: str, err: TetherError) -> TetherError:
        """A missing or ended sandbox as dcode's not-found error; a missing
        route (an older server) and anything else as they are."""
        if err.code == "NOT_FOUND" and not err.detail.startswith("no route"):
            return TetherSandboxNotFoundError(err.code, err.status, f"sandbox {sandbox_id} not found", err.state)
        if err.code == "SANDBOX_STATE_CONFLICT":
            return TetherSandboxNotFoundError(err.code, err.status, err.detail, err.state)
        return err

    def delete(self, *, sandbox_id: str, **kwargs: Any) -> None:
        """Cancel or terminate the sandbox (idempotent for ended ones)."""
        try:
            self._clients.sync.delete_sandbox(sandbox_id)
        except TetherError as err:
            raise self._attach_error(sandbox_id, err) from err

    def list(self, *, cursor: Optional[str] = None, **kwargs: Any) -> dict[str, Any]:
        """The tenant's live sandboxes: {"items": [{"sandbox_id", "metadata"}], "cursor"}."""
        page = self._clients.sync.list_sandboxes(state=("requested", "creating", "ready"), cursor=cursor, **kwargs)
        return _list_response(page)

    def close(self) -> None:
        """Stop the heartbeat and end the owner, which ends its sandboxes."""
        if self._closed:
            return
        self._closed = True
        self._lease.stop()
        if self._lease.named:
            try:
                self._clients.quick.end_owner(self.owner)
            except Exception as err:
                log.warning("could not end owner %s (its lease will lapse): %s", self.owner, err)
        self._clients.close()

    def __enter__(self) -> "TetherProvider":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- async -------------------------------------------------------------

    async def aget_or_create(self, *, sandbox_id: Optional[str] = None, **kwargs: Any) -> "TetherSandbox":
        """get_or_create on the event loop (httpx.AsyncClient; no thread).

        If the awaiting task is cancelled, CancelledError is re-raised at once
        and the sandbox this call requested is deleted by a separate task
        that the provider keeps (and that aclose waits for).
        """
        self._check_open()
        body, ready_timeout = self._create_args(kwargs)
        if sandbox_id:
            return await self._aattach(sandbox_id, ready_timeout)
        key = uuid.uuid4().hex
        t = self._clients.aio()
        sb: Optional[Sandbox] = None
        self._lease.named = True
        try:
            sb = await t.create_sandbox(idempotency_key=key, **body)
            await self._lease.astart()
            sb = await t.wait_sandbox(sb.id, timeout=ready_timeout)
        except BaseException as err:
            # Cancelled (or failed) after the create was sent: end what it
            # made. CancelledError goes on to the caller at once.
            if sb is not None or not _refused(err):
                self._spawn_cleanup(sb.id if sb else None, key, body)
            raise
        if not sb.ready:
            if sb.pending:
                self._spawn_cleanup(sb.id, key, body)
            raise self._not_ready(sb, ready_timeout)
        return TetherSandbox(self, sb)

    def _spawn_cleanup(self, sandbox_id: Optional[str], key: str, body: dict[str, Any]) -> None:
        """Delete the requested sandbox in a task of its own, kept by the
        provider: the caller's cancellation does not reach it, and whoever
        waits for it does so through asyncio.shield."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        task = loop.create_task(self._end_requested(sandbox_id, key, body), name=f"tether-cleanup-{sandbox_id}")
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)

    async def _end_requested(self, sandbox_id: Optional[str], key: str, body: dict[str, Any]) -> None:
        t = self._clients.aio()
        try:
            if sandbox_id is None:
                sandbox_id = (await asyncio.shield(t.create_sandbox(idempotency_key=key, **body))).id
            await asyncio.shield(t.delete_sandbox(sandbox_id))
        except Exception as err:
            log.warning("could not end sandbox %s (its owner lease will): %s", sandbox_id or "being created", err)

    async def _aattach(self, sandbox_id: str, ready_timeout: float) -> "TetherSandbox":
        t = self._clients.aio()
        try:
            sb = await t.wait_sandbox(sandbox_id, timeout=ready_timeout)
        except TetherError as err:
            raise self._attach_error(sandbox_id, err) from err
        if not sb.ready:
            raise self._unattachable(sb, ready_timeout)
        self._lease.named = True
        try:
            sb = await t.transfer_sandbox(sandbox_id, self.owner)
        except TetherError as err:
            raise self._attach_error(sandbox_id, err) from err
        await self._lease.astart()
        return TetherSandbox(self, sb)

    async def adelete(self, *, sandbox_id: str, **kwargs: Any) -> None:
        try:
            await self._clients.aio().delete_sandbox(sandbox_id)
        except TetherError as err:
            raise self._attach_error(sandbox_id, err) from err

    async def alist(self, *, cursor: Optional[str] = None, **kwargs: Any) -> dict[str, Any]:
        page = await self._clients.aio().list_sandboxes(state=("requested", "creating", "ready"), cursor=cursor, **kwargs)
        return _list_response(page)

    async def wait_cleanups(self, timeout: Optional[float] = None) -> None:
        """Wait for the deletes of cancelled get_or_creates to finish."""
        loop = asyncio.get_running_loop()
        pending = [t for t in self._cleanups if t.get_loop() is loop]
        if pending:
            # shield: cancelling this wait does not cancel the deletes.
            await asyncio.wait([asyncio.shield(t) for t in pending], timeout=timeout)

    async def aclose(self) -> None:
        """Stop the heartbeat, finish pending deletes, end the owner."""
        if self._closed:
            return
        self._closed = True
        self._lease.stop(join=False)  # a heartbeat thread, if any, ends by itself
        await self.wait_cleanups(timeout=self._clients._quick_timeout * 2)
        if self._lease.named:
            try:
                await asyncio.wait_for(self._clients.aio().end_owner(self.owner), self._clients._quick_timeout)
            except Exception as err:
                log.warning("could not end owner %s (its lease will lapse): %s", self.owner, err)
        await self._clients.aclose()

    async def __aenter__(self) -> "TetherProvider":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


def _refused(err: BaseException) -> bool:
    """Whether the server answered a create with an error: then it made
    nothing (otherwise, as after a timeout or a cancellation, it may have)."""
    return isinstance(err, TetherError) and 400 <= err.status < 500


def _list_response(page: Any) -> dict[str, Any]:
    return {
        "items": [{"sandbox_id": sb.id, "metadata": {"state": sb.state, "owner": sb.owner, **sb.labels}} for sb in page.items],
        "cursor": page.next_cursor,
    }


class TetherSandbox(BaseSandbox):
    """One Tether sandbox as a deepagents backend: execute, upload_files,
    download_files and their async twins (the rest of BaseSandbox's file
    tools run through execute)."""

    def __init__(self, provider: TetherProvider, sandbox: Sandbox) -> None:
        self._provider = provider
        self._clients = provider._clients
        self._lease = provider._lease
        self.info = sandbox

    def __repr__(self) -> str:
        return f"TetherSandbox({self.id!r}, state={self.info.state!r})"

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def work_dir(self) -> str:
        return self.info.work_dir or "/workspace"

    def _sync(self) -> Tether:
        self._lease.keep_beating()
        return self._clients.sync

    def _aio(self) -> AsyncTether:
        self._lease.akeep_beating()
        return self._clients.aio()

    # -- state ---------------------------------------------------------------

    def refresh(self) -> Sandbox:
        self.info = self._sync().get_sandbox(self.id)
        return self.info

    async def arefresh(self) -> Sandbox:
        self.info = await self._aio().get_sandbox(self.id)
        return self.info

    # -- execute ---------------------------------------------------------------

    @staticmethod
    def _response(res: ExecResult) -> ExecuteResponse:
        output = res.output
        if res.timed_out:
            output += f"\n[command timed out after {res.timeout_seconds}s and was killed]"
        return ExecuteResponse(output=output, exit_code=res.exit_code, truncated=res.truncated)

    def execute(self, command: str, *, timeout: Optional[int] = None) -> ExecuteResponse:
        """Run sh -c command in the sandbox.

        timeout: None = the server's default (60 s); 0 = the server's maximum
        (MAX_EXEC_TIMEOUT); else seconds. A command past it is killed, with
        exit code 124.
        """
        return self._response(self._sync().exec(self.id, command, timeout=timeout))

    async def aexecute(self, command: str, *, timeout: Optional[int] = None) -> ExecuteResponse:  # noqa: ASYNC109
        return self._response(await self._aio().exec(self.id, command, timeout=timeout))

    def stream(self, command: str, *, timeout: Optional[int] = None) -> Any:
        """Iterate the command's output chunks (ExecOutput), then its ExecExit."""
        return self._sync().exec_stream(self.id, command, timeout=timeout)

    def astream(self, command: str, *, timeout: Optional[int] = None) -> Any:
        """Async-iterate the command's output chunks, then its ExecExit."""
        return self._aio().exec_stream(self.id, command, timeout=timeout)

    # -- files -----------------------------------------------------------------

    @staticmethod
    def _file_error(err: TetherError) -> Any:
        literal = FILE_ERRORS.get(err.code)
        if literal is None:
            raise err  # not about this file: the sandbox, the key, the server
        return literal

    def upload_files(self, files: Sequence[tuple[str, bytes]]) -> list[FileUploadResponse]:
        """Write each (path, content); per-file errors come back as
        file_not_found, permission_denied, is_directory or invalid_path, in
        input order. Other errors (the sandbox ended, ...) raise TetherError."""
        t = self._sync()
        out = []
        for path, content in files:
            try:
                t.write_file(self.id, path, content)
                out.append(FileUploadResponse(path=path, error=None))
            except TetherError as err:
                out.append(FileUploadResponse(path=path, error=self._file_error(err)))
        return out

    def download_files(self, paths: Sequence[str]) -> list[FileDownloadResponse]:
        """Read each path; per-file errors as in upload_files, in input order."""
        t = self._sync()
        out = []
        for path in paths:
            try:
                out.append(FileDownloadResponse(path=path, content=t.read_file(self.id, path), error=None))
            except TetherError as err:
                out.append(FileDownloadResponse(path=path, content=None, error=self._file_error(err)))
        return out

    async def aupload_files(self, files: Sequence[tuple[str, bytes]]) -> list[FileUploadResponse]:
        """upload_files with up to max_concurrency transfers in flight."""
        t = self._aio()
        gate = asyncio.Semaphore(self._provider.max_concurrency)

        async def one(path: str, content: bytes) -> FileUploadResponse:
            async with gate:
                try:
                    await t.write_file(self.id, path, content)
                    return FileUploadResponse(path=path, error=None)
                except TetherError as err:
                    return FileUploadResponse(path=path, error=self._file_error(err))

        return list(await _gather_all([one(p, c) for p, c in files]))

    async def adownload_files(self, paths: Sequence[str]) -> list[FileDownloadResponse]:
        """download_files with up to max_concurrency transfers in flight."""
        t = self._aio()
        gate = asyncio.Semaphore(self._provider.max_concurrency)

        async def one(path: str) -> FileDownloadResponse:
            async with gate:
                try:
                    return FileDownloadResponse(path=path, content=await t.read_file(self.id, path), error=None)
                except TetherError as err:
                    return FileDownloadResponse(path=path, content=None, error=self._file_error(err))

        return list(await _gather_all([one(p) for p in paths]))


async def _gather_all(coros: list[Any]) -> list[Any]:
    """gather that, when one fails, cancels the rest before raising."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


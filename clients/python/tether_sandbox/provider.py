"""TetherProvider and TetherSandbox: Tether as a dcode (deepagents-code)
sandbox provider and a deepagents sandbox backend.

The providers of a process own the sandboxes they create through one *owner
lease* per Tether, API key and TTL: one owner name (hostname-pid-random),
whose lease is heartbeated every third of its TTL by one daemon thread,
however many providers the process makes. Nothing relies on exit hooks: if
the process dies in any way (SIGKILL, OOM, a crash, SIGTERM), the heartbeats
stop and Tether ends the owner's sandboxes within the lease plus one janitor
interval. ``close()``/``aclose()`` of the last provider on a lease end the
owner at once; an earlier one deletes its own sandboxes.

dcode calls the *sync* ``get_or_create`` on its server's event loop. There
it returns at once, without any blocking call: the sandbox's id is chosen
here (the create is idempotent on it), the create and the wait for ``ready``
run in a thread of the provider's, and the first tool call waits for them
(an async one without blocking the loop). Called from a thread without a
running loop, ``get_or_create`` returns a ready sandbox, as it always has.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import posixpath
import random
import re
import socket
import string
import threading
import time
import weakref
from typing import Any, Callable, Optional, Sequence

from ._client import AsyncTether, Tether, settings_from_env, ssl_context
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
from ._core import new_sandbox_id
from ._errors import TetherClosedError, TetherError
from ._models import ExecResult, Sandbox

__all__ = [
    "TetherProvider",
    "TetherSandbox",
    "TetherSandboxNotFoundError",
    "TetherLoopBlockedError",
    "default_owner_name",
    "FILE_ERRORS",
    "DEFAULT_EXEC_TIMEOUT",
    "resolve_sandbox_path",
]

log = logging.getLogger("tether_sandbox")

DEFAULT_OWNER_TTL = 30
"""Seconds of the owner lease; heartbeats go every third of it."""

DEFAULT_READY_TIMEOUT = 300.0
"""Seconds get_or_create waits for a sandbox to become ready."""

DEFAULT_EXEC_TIMEOUT = 1800
"""Seconds an execute without a timeout may run (TETHER_EXEC_TIMEOUT): 30
minutes, as every first-party deepagents backend. dcode gives none for
setup scripts and for the agent's commands. Within the server's default
MAX_EXEC_TIMEOUT (1 h)."""

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

_OTHER_ARGS = ("timeout", "adopt")
"""get_or_create keyword arguments about the call itself."""


def _loop_running_here() -> bool:
    """Whether this thread runs an event loop now: then a blocking call here
    stalls every task on it (and blockbuster refuses it)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class TetherLoopBlockedError(RuntimeError):
    """A sync TetherSandbox method was called on the thread of a running
    event loop, where its network round trip would block the loop."""

    def __init__(self, method: str) -> None:
        self.method = method
        way_out = f"await a{method}(...)" if method != "refresh" else "await arefresh()"
        super().__init__(
            f"TetherSandbox.{method} was called on the thread of a running event loop, where it would block the "
            f"loop; it did nothing. From async code, {way_out}; from sync code, call it in a worker thread "
            "(asyncio.to_thread). A setup script (dcode's --sandbox-setup) runs this way: give it to Tether as "
            "the `setup` create parameter instead, which runs it inside the sandbox before the sandbox counts as "
            'ready: [sandboxes.providers.tether.params] setup = "..." in dcode\'s config.toml, or '
            "get_or_create(setup=...)."
        )


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
    for heartbeats and cleanups), and one async client per event loop.

    They share one SSL context, built on first use off any event loop:
    httpx (before 0.28) stats and reads its CA bundle whenever a client is
    made without a ready context, even for http:// URLs. Once closed, no
    client is made again.
    """

    def __init__(self, base_url: str, api_key: str, timeout: float, quick_timeout: float) -> None:
        self._args = (base_url, api_key)
        self._timeout = timeout
        self._quick_timeout = quick_timeout
        self._lock = threading.Lock()  # taken off the loop only
        self._ssl: Any = None
        self._sync: Optional[Tether] = None
        self._quick: Optional[Tether] = None
        # An httpx.AsyncClient is bound to the loop it first ran on: one per
        # loop, dropped with its loop.
        self._asyncs: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncTether]" = weakref.WeakKeyDictionary()
        self.closed = False

    def _check_open(self) -> None:
        if self.closed:
            raise TetherClosedError()

    def _verify(self) -> Any:
        """The shared SSL context. Blocking: never on a running loop's thread."""
        with self._lock:
            if self._ssl is None:
                self._ssl = ssl_context()
            return self._ssl

    @property
    def sync(self) -> Tether:
        self._check_open()
        verify = self._verify()
        with self._lock:
            if self._sync is None:
                self._sync = Tether(*self._args, timeout=self._timeout, verify=verify)
            return self._sync

    @property
    def quick(self) -> Tether:
        self._check_open()
        verify = self._verify()
        with self._lock:
            if self._quick is None:
                self._quick = Tether(
                    *self._args, timeout=self._quick_timeout, connect_timeout=self._quick_timeout, verify=verify
                )
            return self._quick

    async def aio(self) -> AsyncTether:
        """The async client of the running loop (made on first use; the SSL
        context is built in a worker thread the first time)."""
        self._check_open()
        loop = asyncio.get_running_loop()
        client = self._asyncs.get(loop)
        if client is None:
            verify = self._ssl if self._ssl is not None else await asyncio.to_thread(self._verify)
            client = self._asyncs.get(loop)  # made meanwhile by another task?
            if client is None:
                client = AsyncTether(*self._args, timeout=self._timeout, verify=verify)
                self._asyncs[loop] = client
        return client

    def _take(self) -> tuple[list[Tether], list[tuple[asyncio.AbstractEventLoop, AsyncTether]]]:
        self.closed = True
        sync = [c for c in (self._sync, self._quick) if c is not None]
        self._sync = self._quick = None
        asyncs = list(self._asyncs.items())
        self._asyncs.clear()
        return sync, asyncs

    def close(self) -> None:
        """Close every client (blocking: not on a loop's thread)."""
        sync, asyncs = self._take()
        for client in sync:
            client.close()
        for loop, aclient in asyncs:
            if loop.is_closed():
                continue  # its connections went with it
            try:
                if loop.is_running():
                    asyncio.run_coroutine_threadsafe(aclient.aclose(), loop)
                else:
                    loop.run_until_complete(aclient.aclose())
            except RuntimeError:
                pass

    async def aclose(self) -> None:
        """Close every client: this loop's awaited, others' on their loops,
        the sync ones in a worker thread (closing them takes their pools' locks)."""
        sync, asyncs = self._take()
        here = asyncio.get_running_loop()
        for loop, aclient in asyncs:
            if loop is here:
                await aclient.aclose()
            elif loop.is_running():
                asyncio.run_coroutine_threadsafe(aclient.aclose(), loop)
        if sync:
            await asyncio.to_thread(lambda: [c.close() for c in sync])


class _OwnerLease:
    """An owner lease and the heartbeat that keeps it alive, shared by the
    providers of the process that speak to one Tether with one key and TTL
    (_shared_lease), with HTTP clients of its own: a provider that closes
    does not take them away from the others.

    The heartbeat is a daemon thread, whether the sandboxes came from sync
    or async code: it lives as long as the process (not as long as whichever
    event loop started it), never runs on a loop, and stops with the process
    however that ends.
    """

    def __init__(self, clients: "_Clients", owner: str, ttl: int) -> None:
        self.clients = clients
        self.users = 0  # providers holding it (changed under _LEASES_LOCK)
        self.owner = owner
        self.ttl = ttl
        self.interval = max(0.2, ttl / 3)
        self.beat_timeout = max(0.5, ttl / 2)
        self.named = False  # a create or transfer named the owner
        self.key: tuple[Any, ...] = ()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        """Renew the lease now (with our TTL, not the server's default) and
        make sure the heartbeat runs. Blocking: not on a loop's thread."""
        self.clients.sync.renew_owner_lease(self.owner, self.ttl)
        self.keep_beating()

    async def astart(self) -> None:
        """start(), awaited."""
        await (await self.clients.aio()).renew_owner_lease(self.owner, self.ttl)
        self.keep_beating()

    def keep_beating(self) -> None:
        """Start the heartbeat thread if the owner is named and none runs.
        (Called on an event loop's thread too: it only starts a thread.)"""
        thread = self._thread
        if not self.named or self._stop.is_set() or (thread is not None and thread.is_alive()):
            return
        thread = threading.Thread(target=self._beat, name=f"tether-lease-{self.owner}", daemon=True)
        self._thread = thread
        thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.clients.quick.renew_owner_lease(self.owner, self.ttl)
            except Exception as err:  # transient: the next beat is well within the lease
                log.debug("owner %s: heartbeat failed: %s", self.owner, err)

    def stop(self, *, join: bool = True) -> None:
        self._stop.set()
        thread = self._thread
        if join and thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self.beat_timeout + 1)  # it wakes at once unless mid-request


_LEASES: "dict[tuple[Any, ...], _OwnerLease]" = {}
"""The process's owner leases, by (pid, base URL, API key, owner given, TTL)."""

_LEASES_LOCK = threading.Lock()  # held briefly, never across a request


def _shared_lease(base_url: str, api_key: str, owner: Optional[str], ttl: int, timeout: float) -> _OwnerLease:
    """The process's owner lease for this Tether, key and TTL (and owner, if
    one is given), made on first use with a new owner name; taken by one
    more provider. The pid is part of the key: a forked child makes its own."""
    key = (os.getpid(), base_url, api_key, owner, ttl)
    with _LEASES_LOCK:
        lease = _LEASES.get(key)
        if lease is None:
            quick = min(timeout, max(1.0, ttl / 2))
            lease = _OwnerLease(_Clients(base_url, api_key, timeout, quick), owner or default_owner_name(), ttl)
            lease.key = key
            _LEASES[key] = lease
        lease.users += 1
        return lease


def _release_lease(lease: _OwnerLease) -> bool:
    """Let one provider's hold on lease go; True if it was the last (the
    lease is then out of the registry: the next provider makes a new one)."""
    with _LEASES_LOCK:
        lease.users -= 1
        if lease.users > 0:
            return False
        if _LEASES.get(lease.key) is lease:
            del _LEASES[lease.key]
        return True


class _Background:
    """The provider's worker threads: creates and attaches that a
    get_or_create on an event loop's thread handed off, and deletes asked for
    there. Each result is a concurrent.futures.Future; close() waits for the
    threads (bounded), so none outlives the provider unseen. No lock: set
    add and discard are atomic, and run() is called on loops' threads."""

    def __init__(self) -> None:
        self._threads: set[threading.Thread] = set()

    def run(self, name: str, fn: Callable[[], Any]) -> "concurrent.futures.Future[Any]":
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        future.set_running_or_notify_cancel()  # from here on, cancel() cannot drop it

        def body() -> None:
            try:
                future.set_result(fn())
            except BaseException as err:  # noqa: BLE001 - handed to whoever waits
                future.set_exception(err)
            finally:
                self._threads.discard(thread)

        thread = threading.Thread(target=body, name=name, daemon=True)
        self._threads.add(thread)
        thread.start()  # (blockbuster allows the wait inside Thread.start)
        return future

    def join(self, deadline: float) -> None:
        """Wait for the threads until the monotonic deadline."""
        for thread in list(self._threads):
            if thread is not threading.current_thread():
                thread.join(timeout=max(0.0, deadline - time.monotonic()))


class TetherProvider(SandboxProvider):
    """Tether as a dcode sandbox provider (``dcode --sandbox tether``).

    With no arguments it reads TETHER_URL and TETHER_API_KEY (both required),
    and optionally TETHER_PROVIDER (the Tether provider to create with; the
    server's default otherwise), TETHER_OWNER_TTL (seconds, default 30),
    TETHER_EXEC_TIMEOUT (seconds an untimed execute may run, default 1800)
    and TETHER_ADOPT (``1``/``true``: attaching by id adopts the sandbox).

    The providers of a process that speak to one Tether with one API key
    and owner TTL share one owner (``owner``, hostname-pid-random unless
    given) and one heartbeat thread: a process has one owner lease however
    many providers it makes.

    get_or_create keyword arguments (dcode's ``[sandboxes.providers.tether.params]``):
    provider, labels, env, setup (a script run inside the sandbox before it
    counts as ready), ttl_seconds, params (provider-specific options, e.g.
    {"network": "none"}), timeout (seconds to wait for ready) and adopt.
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
        exec_timeout: Optional[int] = None,
        adopt: Optional[bool] = None,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    ) -> None:
        base_url, api_key = settings_from_env(base_url, api_key)
        self.base_url = base_url
        self.provider = provider or os.environ.get("TETHER_PROVIDER") or None
        if owner_ttl is None:
            owner_ttl = _env_seconds("TETHER_OWNER_TTL", DEFAULT_OWNER_TTL)
        if owner_ttl < 1:
            raise ValueError("owner_ttl must be at least 1 second")
        if exec_timeout is None:
            exec_timeout = _env_seconds("TETHER_EXEC_TIMEOUT", DEFAULT_EXEC_TIMEOUT)
        if exec_timeout < 0:
            raise ValueError("exec_timeout must be 0 (the server's maximum) or a positive number of seconds")
        if adopt is None:
            adopt = os.environ.get("TETHER_ADOPT", "").strip().lower() in ("1", "true", "yes")
        self.owner_ttl = int(owner_ttl)
        self.exec_timeout = int(exec_timeout)
        self.adopt = bool(adopt)
        self.labels = dict(labels or {})
        self.ready_timeout = float(ready_timeout)
        self.max_concurrency = max(1, int(max_concurrency))
        self._clients = _Clients(base_url, api_key, float(timeout), min(float(timeout), max(1.0, self.owner_ttl / 2)))
        self._lease = _shared_lease(base_url, api_key, owner, self.owner_ttl, float(timeout))
        self.owner = self._lease.owner
        self._held: set[str] = set()  # ids of the sandboxes this provider made or adopted, not deleted
        self._background = _Background()
        self._pending: dict[str, dict[str, Any]] = {}  # id -> body of creates under way in the background
        self._unmade: set[str] = set()  # ids of background creates the server refused
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

    async def aclient(self) -> AsyncTether:
        """The provider's async client for the running loop."""
        return await self._clients.aio()

    # -- the create request ------------------------------------------------

    def _call_args(self, kwargs: dict[str, Any]) -> tuple[dict[str, Any], float, bool]:
        """The create request's body, the ready timeout and whether an
        attach adopts, from get_or_create's keyword arguments."""
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        ready_timeout = float(kwargs.pop("timeout", self.ready_timeout))
        adopt = bool(kwargs.pop("adopt", self.adopt))
        unknown = sorted(set(kwargs) - set(_CREATE_ARGS))
        if unknown:
            raise TypeError(
                f"TetherProvider.get_or_create got unsupported arguments {unknown}; "
                f"it takes {', '.join(_CREATE_ARGS + _OTHER_ARGS)}"
            )
        body = {k: kwargs[k] for k in _CREATE_ARGS if k in kwargs}
        body.setdefault("provider", self.provider)
        if self.labels or body.get("labels"):
            body["labels"] = {**self.labels, **dict(body.get("labels") or {})}
        body["owner"] = self.owner
        body["id"] = new_sandbox_id()
        # A copy of the caller's dicts, and JSON-able now: the request is sent
        # (and replayed, which must match) later, maybe from another thread.
        try:
            body = json.loads(json.dumps(body))
        except (TypeError, ValueError) as err:
            raise TypeError(f"TetherProvider.get_or_create: the arguments must be JSON values: {err}") from None
        return body, ready_timeout, adopt

    def _check_open(self) -> None:
        if self._closed:
            raise TetherClosedError()

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
        """Create a sandbox owned by this provider, or, with sandbox_id,
        attach to a live one (adopting it only with adopt=True).

        From a thread without a running event loop it blocks until the
        sandbox is ready and returns it. On an event loop's thread (dcode
        calls it there) it returns at once, without any blocking call: the
        handle's id is final, the create (or attach) runs in a thread of the
        provider's, and the first tool call waits for it; a failure is raised
        there (TetherError, naming the sandbox, its state and the code).
        """
        self._check_open()
        body, ready_timeout, adopt = self._call_args(kwargs)
        if not sandbox_id:
            self._held.add(body["id"])
        if _loop_running_here():
            return self._in_background(sandbox_id, body, ready_timeout, adopt)
        if sandbox_id:
            return TetherSandbox(self, self._attach(sandbox_id, ready_timeout, adopt))
        return TetherSandbox(self, self._create(body, ready_timeout))

    def _in_background(
        self, sandbox_id: Optional[str], body: dict[str, Any], ready_timeout: float, adopt: bool
    ) -> "TetherSandbox":
        if sandbox_id:
            future = self._background.run(
                f"tether-attach-{sandbox_id}", lambda: self._attach(sandbox_id, ready_timeout, adopt)
            )
            return TetherSandbox(self, Sandbox(id=sandbox_id, state="unknown"), future)
        sid = body["id"]
        self._lease.named = True

        def create() -> Sandbox:
            try:
                return self._create(body, ready_timeout)
            except TetherError as err:
                if _refused(err) and err.code != "SANDBOX_STATE_CONFLICT":
                    self._unmade.add(sid)  # the server refused it: nothing to delete
                    named = TetherError(err.code, err.status, f"sandbox {sid} was not created: {err.detail}",
                                        err.state, request_id=err.request_id, problem=err.problem)
                else:
                    named = err  # it names the sandbox and its state already
                log.warning("sandbox %s: creation failed: %s", sid, named)
                raise named from err
            except BaseException as err:
                log.warning("sandbox %s: creation failed: %s", sid, err)
                raise
            finally:
                self._pending.pop(sid, None)

        self._pending[sid] = body
        future = self._background.run(f"tether-create-{sid}", create)
        return TetherSandbox(self, Sandbox(id=sid, state="requested", owner=self.owner), future)

    def _create(self, body: dict[str, Any], ready_timeout: float) -> Sandbox:
        """Create, start the lease, wait for ready (blocking); on any failure
        after the create was sent, end what it made."""
        t = self._clients.sync
        sb: Optional[Sandbox] = None
        self._lease.named = True
        try:
            sb = t.create_sandbox(**body)
            self._lease.start()
            sb = t.wait_sandbox(sb.id, timeout=ready_timeout)
        except BaseException as err:
            if sb is not None or not _refused(err):
                self._end_requested_sync(body)
            else:
                self._held.discard(body["id"])  # refused: nothing was made
            raise
        if not sb.ready:
            if sb.pending:
                self._end_requested_sync(body)
            raise self._not_ready(sb, ready_timeout)
        return sb

    def _end_requested_sync(self, body: dict[str, Any]) -> None:
        """End the sandbox a create with this body made or is making."""
        try:
            _end_made(self._clients.quick, body)
        except Exception as err:
            log.warning("could not end sandbox %s (its owner lease will): %s", body["id"], err)

    def _attach(self, sandbox_id: str, ready_timeout: float, adopt: bool) -> Sandbox:
        t = self._clients.sync
        try:
            sb = t.wait_sandbox(sandbox_id, timeout=ready_timeout)
        except TetherError as err:
            raise self._attach_error(sandbox_id, err) from err
        if not sb.ready:
            raise self._unattachable(sb, ready_timeout)
        if not adopt:
            return sb
        self._lease.named = True
        try:
            sb = t.transfer_sandbox(sandbox_id, self.owner)
        except TetherError as err:
            raise self._attach_error(sandbox_id, err) from err
        self._held.add(sandbox_id)
        self._lease.start()
        return sb

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
        """Cancel or terminate the sandbox (idempotent for ended ones).

        A sandbox this provider is still creating in the background is
        ended once its create has landed (the create is replayed, which is
        idempotent, then deleted). On an event loop's thread the delete is
        handed to a thread of the provider's and this returns at once.
        """
        if sandbox_id in self._unmade:
            return  # its create was refused: it never existed
        pending = self._pending.get(sandbox_id)
        if _loop_running_here():
            self._background.run(f"tether-delete-{sandbox_id}", lambda: self._delete(sandbox_id, pending, quiet=True))
            return
        self._delete(sandbox_id, pending, quiet=False)

    def _delete(self, sandbox_id: str, pending: Optional[dict[str, Any]], *, quiet: bool) -> None:
        try:
            if pending is not None:
                _end_made(self._clients.sync, pending)
            else:
                self._clients.sync.delete_sandbox(sandbox_id)
            self._held.discard(sandbox_id)
        except TetherError as err:
            if quiet:
                log.warning("could not delete sandbox %s: %s", sandbox_id, err)
                return
            raise self._attach_error(sandbox_id, err) from err

    def list(self, *, cursor: Optional[str] = None, **kwargs: Any) -> dict[str, Any]:
        """The tenant's live sandboxes: {"items": [{"sandbox_id", "metadata"}], "cursor"}."""
        page = self._clients.sync.list_sandboxes(state=("requested", "creating", "ready"), cursor=cursor, **kwargs)
        return _list_response(page)

    def close(self) -> None:
        """End this provider's sandboxes. The last provider of the process on
        its owner lease stops the heartbeat and ends the owner, which ends
        them all at once; an earlier one deletes the sandboxes it made or
        adopted and leaves the lease to the others. On an event loop's
        thread, that is done from a thread of the provider's (this returns
        at once)."""
        if self._closed:
            return
        self._closed = True
        on_loop = _loop_running_here()
        last = _release_lease(self._lease)
        if last:
            self._lease.stop(join=not on_loop)

        def finish() -> None:
            # Ending the owner ends its sandboxes, those still being created
            # included; then the threads get one bounded wait, together.
            deadline = time.monotonic() + self._clients._quick_timeout * 2
            if not last:
                self._end_held()
            elif self._lease.named:
                try:
                    self._clients.quick.end_owner(self.owner)
                except Exception as err:
                    log.warning("could not end owner %s (its lease will lapse): %s", self.owner, err)
            self._background.join(deadline)
            self._clients.close()
            if last:
                self._lease.clients.close()

        if on_loop:
            self._background.run(f"tether-close-{self.owner}", finish)
        else:
            finish()

    def _end_held(self) -> None:
        """Delete the sandboxes this provider made or adopted (blocking):
        those of a create still under way once it has landed."""
        for sandbox_id in sorted(self._held):
            pending = self._pending.get(sandbox_id)
            try:
                if pending is not None:
                    _end_made(self._clients.quick, pending)
                elif sandbox_id not in self._unmade:
                    self._clients.quick.delete_sandbox(sandbox_id)
            except Exception as err:
                log.warning("could not delete sandbox %s (the owner lease will end it): %s", sandbox_id, err)
        self._held.clear()

    async def _aend_held(self) -> None:
        """_end_held, awaited."""
        t = await self._clients.aio()
        for sandbox_id in sorted(self._held):
            pending = self._pending.get(sandbox_id)
            try:
                if pending is not None:
                    await _aend_made(t, pending)
                elif sandbox_id not in self._unmade:
                    await asyncio.wait_for(t.delete_sandbox(sandbox_id), self._clients._quick_timeout)
            except Exception as err:
                log.warning("could not delete sandbox %s (the owner lease will end it): %s", sandbox_id, err)
        self._held.clear()

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
        body, ready_timeout, adopt = self._call_args(kwargs)
        if sandbox_id:
            return await self._aattach(sandbox_id, ready_timeout, adopt)
        self._held.add(body["id"])
        sb: Optional[Sandbox] = None
        self._lease.named = True
        try:
            t = await self._clients.aio()
            sb = await t.create_sandbox(**body)
            await self._lease.astart()
            sb = await t.wait_sandbox(sb.id, timeout=ready_timeout)
        except BaseException as err:
            # Cancelled (or failed) after the create was sent: end what it
            # made. CancelledError goes on to the caller at once.
            if sb is not None or not _refused(err):
                self._spawn_cleanup(body)
            else:
                self._held.discard(body["id"])  # refused: nothing was made
            raise
        if not sb.ready:
            if sb.pending:
                self._spawn_cleanup(body)
            raise self._not_ready(sb, ready_timeout)
        return TetherSandbox(self, sb)

    def _spawn_cleanup(self, body: dict[str, Any]) -> None:
        """Delete the requested sandbox in a task of its own, kept by the
        provider: the caller's cancellation does not reach it, and whoever
        waits for it does so through asyncio.shield."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        task = loop.create_task(self._end_requested(body), name=f"tether-cleanup-{body['id']}")
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)

    async def _end_requested(self, body: dict[str, Any]) -> None:
        try:
            t = await self._clients.aio()
            await asyncio.shield(_aend_made(t, body))
        except Exception as err:
            log.warning("could not end sandbox %s (its owner lease will): %s", body["id"], err)

    async def _aattach(self, sandbox_id: str, ready_timeout: float, adopt: bool) -> "TetherSandbox":
        t = await self._clients.aio()
        try:
            sb = await t.wait_sandbox(sandbox_id, timeout=ready_timeout)
        except TetherError as err:
            raise self._attach_error(sandbox_id, err) from err
        if not sb.ready:
            raise self._unattachable(sb, ready_timeout)
        if adopt:
            self._lease.named = True
            try:
                sb = await t.transfer_sandbox(sandbox_id, self.owner)
            except TetherError as err:
                raise self._attach_error(sandbox_id, err) from err
            self._held.add(sandbox_id)
            await self._lease.astart()
        return TetherSandbox(self, sb)

    async def adelete(self, *, sandbox_id: str, **kwargs: Any) -> None:
        if sandbox_id in self._unmade:
            return
        pending = self._pending.get(sandbox_id)
        try:
            t = await self._clients.aio()
            if pending is not None:
                await _aend_made(t, pending)
            else:
                await t.delete_sandbox(sandbox_id)
            self._held.discard(sandbox_id)
        except TetherError as err:
            raise self._attach_error(sandbox_id, err) from err

    async def alist(self, *, cursor: Optional[str] = None, **kwargs: Any) -> dict[str, Any]:
        t = await self._clients.aio()
        page = await t.list_sandboxes(state=("requested", "creating", "ready"), cursor=cursor, **kwargs)
        return _list_response(page)

    async def wait_cleanups(self, timeout: Optional[float] = None) -> None:
        """Wait for the deletes of cancelled get_or_creates to finish."""
        loop = asyncio.get_running_loop()
        pending = [t for t in self._cleanups if t.get_loop() is loop]
        if pending:
            # shield: cancelling this wait does not cancel the deletes.
            await asyncio.wait([asyncio.shield(t) for t in pending], timeout=timeout)

    async def aclose(self) -> None:
        """close(), awaited: finish pending deletes, then end the owner (the
        last provider on the lease) or this provider's sandboxes."""
        if self._closed:
            return
        self._closed = True
        last = _release_lease(self._lease)
        if last:
            self._lease.stop(join=False)  # a heartbeat thread, if any, ends by itself
        deadline = time.monotonic() + self._clients._quick_timeout * 2
        await self.wait_cleanups(timeout=self._clients._quick_timeout * 2)
        if not last:
            await self._aend_held()
        elif self._lease.named:
            try:
                t = await self._clients.aio()
                await asyncio.wait_for(t.end_owner(self.owner), self._clients._quick_timeout)
            except Exception as err:
                log.warning("could not end owner %s (its lease will lapse): %s", self.owner, err)
        await asyncio.to_thread(self._background.join, deadline)
        await self._clients.aclose()
        if last:
            await self._lease.clients.aclose()

    async def __aenter__(self) -> "TetherProvider":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


def _end_made(t: Tether, body: dict[str, Any]) -> None:
    """End the sandbox a create with this body made, or is making: delete
    it; if the server has not heard of it (the create is still in flight,
    or its answer was lost), replay the create, which is idempotent on the
    id, so that it exists, and delete it then. Deleting first spares the
    replay (and its quota) in the common case."""
    try:
        t.delete_sandbox(body["id"])
        return
    except TetherError as err:
        if err.code != "NOT_FOUND":
            raise
    t.create_sandbox(**body)
    t.delete_sandbox(body["id"])


async def _aend_made(t: AsyncTether, body: dict[str, Any]) -> None:
    """_end_made, awaited."""
    try:
        await t.delete_sandbox(body["id"])
        return
    except TetherError as err:
        if err.code != "NOT_FOUND":
            raise
    await t.create_sandbox(**body)
    await t.delete_sandbox(body["id"])


def _env_seconds(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    try:
        return int(raw) if raw else default
    except ValueError:
        raise ValueError(f"{name} must be a whole number of seconds, not {raw!r}") from None


def _refused(err: BaseException) -> bool:
    """Whether the server answered a create with an error: then it made
    nothing (otherwise, as after a timeout or a cancellation, it may have)."""
    return isinstance(err, TetherError) and 400 <= err.status < 500


def _list_response(page: Any) -> dict[str, Any]:
    return {
        "items": [{"sandbox_id": sb.id, "metadata": {"state": sb.state, "owner": sb.owner, **sb.labels}} for sb in page.items],
        "cursor": page.next_cursor,
    }


def resolve_sandbox_path(work_dir: str, path: str) -> str:
    """The absolute path that path names for a shell whose working directory
    is work_dir: a relative path is taken from work_dir (``a/b`` is
    ``work_dir/a/b``; ``.`` and ``..`` are resolved, never above ``/``), a
    trailing slash kept; an absolute path, or ``""``, is left as it is
    (Tether judges it)."""
    if not path or path.startswith("/"):
        return path
    resolved = posixpath.normpath(posixpath.join(work_dir, path))
    if resolved.startswith("//"):  # normpath keeps a leading "//" (POSIX leaves it to the system)
        resolved = "/" + resolved.lstrip("/")
    return resolved + "/" if path.endswith("/") and not resolved.endswith("/") else resolved


def _file_error(err: Exception) -> str:
    """deepagents' literal for a per-file error, else the failure as a
    string: files come back with their errors, never raised (deepagents'
    "partial success"), even when the sandbox itself cannot serve."""
    if isinstance(err, TetherError):
        return FILE_ERRORS.get(err.code) or str(err)
    return f"{type(err).__name__}: {err}"


class TetherSandbox(BaseSandbox):
    """One Tether sandbox as a deepagents backend: execute, upload_files,
    download_files and their async twins (the rest of BaseSandbox's file
    tools run through execute)."""

    def __init__(
        self, provider: TetherProvider, sandbox: Sandbox, creation: "Optional[concurrent.futures.Future[Any]]" = None
    ) -> None:
        self._provider = provider
        self._clients = provider._clients
        self._lease = provider._lease
        self._id = sandbox.id
        self._creation = creation
        self.info = sandbox

    def __repr__(self) -> str:
        return f"TetherSandbox({self.id!r}, state={self.info.state!r})"

    @property
    def id(self) -> str:
        return self._id

    @property
    def work_dir(self) -> str:
        return self.info.work_dir or "/workspace"

    def resolve_path(self, path: str) -> str:
        """The absolute path path names in the sandbox, as a shell in its
        working directory would open it (resolve_sandbox_path): relative
        paths are taken from work_dir (/workspace). upload_files and
        download_files (so deepagents' file tools) take paths this way."""
        return resolve_sandbox_path(self.work_dir, path)

    @property
    def creating(self) -> bool:
        """Whether a background create (or attach) is still under way."""
        return self._creation is not None and not self._creation.done()

    def _check_open(self) -> None:
        """Raise TetherClosedError (NOT_INITIALIZED), with no request, once
        the provider is closed."""
        if self._provider._closed:
            raise TetherClosedError(f"sandbox {self.id}'s TetherProvider")

    def _sync(self, method: str) -> Tether:
        """The sync client, once the sandbox is ready; never on a loop."""
        self._check_open()
        if _loop_running_here():
            raise TetherLoopBlockedError(method)
        creation = self._creation
        if creation is not None:
            self.info = creation.result()  # raises the creation's failure
            self._creation = None
        self._lease.keep_beating()
        return self._clients.sync

    async def _aio(self) -> AsyncTether:
        """The async client, once the sandbox is ready (awaited, not blocked on)."""
        self._check_open()
        creation = self._creation
        if creation is not None:
            self.info = await asyncio.shield(asyncio.wrap_future(creation))
            self._creation = None
        self._lease.keep_beating()
        return await self._clients.aio()

    # -- state ---------------------------------------------------------------

    def refresh(self) -> Sandbox:
        self.info = self._sync("refresh").get_sandbox(self.id)
        return self.info

    async def arefresh(self) -> Sandbox:
        self.info = await (await self._aio()).get_sandbox(self.id)
        return self.info

    # -- execute ---------------------------------------------------------------

    @staticmethod
    def _response(res: ExecResult) -> ExecuteResponse:
        output = res.output
        if res.timed_out:
            output += f"\n[command timed out after {res.timeout_seconds}s and was killed]"
        return ExecuteResponse(output=output, exit_code=res.exit_code, truncated=res.truncated)

    def _timeout(self, timeout: Optional[int]) -> int:
        return self._provider.exec_timeout if timeout is None else int(timeout)

    def execute(self, command: str, *, timeout: Optional[int] = None) -> ExecuteResponse:
        """Run sh -c command in the sandbox.

        timeout: None = the provider's exec_timeout (TETHER_EXEC_TIMEOUT,
        default 1800 s); 0 = the server's maximum (MAX_EXEC_TIMEOUT); else
        seconds. A command past it is killed, with exit code 124. On an event
        loop's thread this raises TetherLoopBlockedError at once (use
        aexecute, or the `setup` create parameter for setup scripts). A
        failed request raises TetherError (a dcode SandboxError); once the
        provider is closed, TetherClosedError (NOT_INITIALIZED) at once,
        without a request.
        """
        client = self._sync("execute")
        return self._response(client.exec(self.id, command, timeout=self._timeout(timeout)))

    async def aexecute(self, command: str, *, timeout: Optional[int] = None) -> ExecuteResponse:  # noqa: ASYNC109
        client = await self._aio()
        return self._response(await client.exec(self.id, command, timeout=self._timeout(timeout)))

    def stream(self, command: str, *, timeout: Optional[int] = None) -> Any:
        """Iterate the command's output chunks (ExecOutput), then its ExecExit."""
        return self._sync("stream").exec_stream(self.id, command, timeout=self._timeout(timeout))

    async def astream(self, command: str, *, timeout: Optional[int] = None) -> Any:
        """Async-iterate the command's output chunks, then its ExecExit."""
        client = await self._aio()
        async for event in client.exec_stream(self.id, command, timeout=self._timeout(timeout)):
            yield event

    # -- files -----------------------------------------------------------------

    def upload_files(self, files: Sequence[tuple[str, bytes]]) -> list[FileUploadResponse]:
        """Write each (path, content); a relative path is taken from the
        working directory (resolve_path). Results in input order, each with
        error None, one of deepagents' literals (file_not_found,
        permission_denied, is_directory, invalid_path) or, for a failure
        that is not about the file (the sandbox ended or failed to start, a
        bad key, the server unreachable), that failure as a string. Never
        raises for those; once the provider is closed it raises
        TetherClosedError (NOT_INITIALIZED) at once, without a request."""
        try:
            t = self._sync("upload_files")
        except (TetherLoopBlockedError, TetherClosedError):
            raise
        except Exception as err:  # the sandbox cannot serve: per file, not raised
            return [FileUploadResponse(path=path, error=_file_error(err)) for path, _ in files]
        out = []
        for path, content in files:
            try:
                t.write_file(self.id, self.resolve_path(path), content)
                out.append(FileUploadResponse(path=path, error=None))
            except TetherError as err:
                out.append(FileUploadResponse(path=path, error=_file_error(err)))
        return out

    def download_files(self, paths: Sequence[str]) -> list[FileDownloadResponse]:
        """Read each path; errors per file as in upload_files, in input order."""
        try:
            t = self._sync("download_files")
        except (TetherLoopBlockedError, TetherClosedError):
            raise
        except Exception as err:  # the sandbox cannot serve: per file, not raised
            return [FileDownloadResponse(path=path, content=None, error=_file_error(err)) for path in paths]
        out = []
        for path in paths:
            try:
                out.append(FileDownloadResponse(path=path, content=t.read_file(self.id, self.resolve_path(path)), error=None))
            except TetherError as err:
                out.append(FileDownloadResponse(path=path, content=None, error=_file_error(err)))
        return out

    async def aupload_files(self, files: Sequence[tuple[str, bytes]]) -> list[FileUploadResponse]:
        """upload_files with up to max_concurrency transfers in flight."""
        try:
            t = await self._aio()
        except TetherClosedError:
            raise
        except Exception as err:  # the sandbox cannot serve: per file, not raised
            return [FileUploadResponse(path=path, error=_file_error(err)) for path, _ in files]
        gate = asyncio.Semaphore(self._provider.max_concurrency)

        async def one(path: str, content: bytes) -> FileUploadResponse:
            async with gate:
                try:
                    await t.write_file(self.id, self.resolve_path(path), content)
                    return FileUploadResponse(path=path, error=None)
                except TetherError as err:
                    return FileUploadResponse(path=path, error=_file_error(err))

        return list(await _gather_all([one(p, c) for p, c in files]))

    async def adownload_files(self, paths: Sequence[str]) -> list[FileDownloadResponse]:
        """download_files with up to max_concurrency transfers in flight."""
        try:
            t = await self._aio()
        except TetherClosedError:
            raise
        except Exception as err:  # the sandbox cannot serve: per file, not raised
            return [FileDownloadResponse(path=path, content=None, error=_file_error(err)) for path in paths]
        gate = asyncio.Semaphore(self._provider.max_concurrency)

        async def one(path: str) -> FileDownloadResponse:
            async with gate:
                try:
                    return FileDownloadResponse(path=path, content=await t.read_file(self.id, self.resolve_path(path)), error=None)
                except TetherError as err:
                    return FileDownloadResponse(path=path, content=None, error=_file_error(err))

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

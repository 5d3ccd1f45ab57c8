"""A blocking-call guard for event loops, in the manner of blockbuster.

blockbuster (what ``langgraph dev`` arms under dcode) replaces blocking
functions with wrappers that raise when they are called on a thread whose
event loop is running. It cannot be installed here (no PyPI), so this is
our own guard, written from blockbuster's list and rules:

* sockets: ``connect``, ``accept``, ``send``, ``sendall``, ``sendto``,
  ``sendmsg``, ``recv``, ``recv_into``, ``recvfrom``, ``recvfrom_into``,
  ``recvmsg`` on a socket that can block (``gettimeout() != 0``; asyncio's
  non-blocking sockets pass), and the same on ``ssl.SSLSocket``;
* name resolution: ``socket.getaddrinfo``, ``gethostbyname(_ex)``,
  ``gethostbyaddr``, ``getnameinfo``;
* files: ``os.stat``, ``os.lstat``, ``os.listdir``, ``os.scandir``,
  ``os.access``, ``os.statvfs``, ``os.readlink``, ``os.getcwd``,
  ``os.path.abspath`` and the ``os.path`` functions built on them;
  ``os.mkdir``, ``os.rmdir``, ``os.unlink``, ``os.remove``, ``os.rename``,
  ``os.replace``, ``os.link``, ``os.symlink``, ``os.sendfile``; ``open`` and
  ``io.open`` (and every other file open, through the ``open`` audit event),
  except the module files an import reads;
* ``time.sleep``, even of 0;
* waits: ``threading.Condition.wait`` (and so ``Event.wait``,
  ``Semaphore.acquire``, ``queue.Queue.get``), ``threading.Thread.join`` of a
  live thread, ``concurrent.futures.Future.result``/``exception`` of a
  future not yet done, ``threading.Lock`` acquisitions that would wait on a
  held lock made through ``threading.Lock()``. As in blockbuster, the waits
  inside ``Thread.start`` (it waits for the new thread to run) and
  ``ThreadPoolExecutor.submit`` are allowed;
* process spawns: ``subprocess.Popen``, ``os.system``, ``os.posix_spawn``,
  ``os.spawn*``, ``os.fork``, ``os.exec*`` (audit events), except asyncio's
  own (``asyncio.create_subprocess_exec``), which does not wait for the child.

Where it differs from blockbuster, said plainly:

* it sees less: locks that C code or modules imported before
  :func:`install` made with ``_thread.allocate_lock`` (blockbuster patches
  the lock type itself, with forbiddenfruit); reads and writes of files and
  descriptors already open (``os.read``, ``os.write``,
  ``io.TextIOWrapper.write``, so a logging ``FileHandler``'s writes: files
  are refused at ``open`` instead); sqlite3 and ``input``;
* it refuses more: process spawns (blockbuster has no rule for them) and
  DNS lookups (blockbuster sees them only as the socket calls they lead to).

A violation raises :class:`BlockingCallError` and is recorded in
:data:`violations`. The guard is active only inside :func:`guarded`; the
wrappers are installed once per process (audit hooks cannot be removed).
"""

from __future__ import annotations

import _thread
import asyncio
import concurrent.futures
import contextlib
import os
import socket
import ssl
import sys
import threading
import time
from typing import Any, Callable, Iterator

__all__ = ["BlockingCallError", "guarded", "violations", "install"]


class BlockingCallError(RuntimeError):
    """A blocking call on a running event loop's thread."""


violations: list[str] = []

_active = 0
_local = threading.local()  # .inside: the guard's own code is running
_installed = False
_MODULE_FILES = (".py", ".pyc", ".so", ".pth", ".pyi")

# (file name suffix, function name) pairs in whose frames a wait is allowed:
# the waits blockbuster allows too.
_MAY_WAIT_IN = (
    ("threading.py", "start"),
    ("concurrent/futures/thread.py", "submit"),
    ("asyncio/base_events.py", "shutdown_default_executor"),
)
# Frames in which a process spawn is asyncio's own (it does not wait).
_MAY_SPAWN_IN = (("asyncio/base_subprocess.py", "__init__"), ("asyncio/unix_events.py", "_start"))


def _guarding() -> bool:
    """Whether a call here is on a running loop's thread while active."""
    if not _active or getattr(_local, "inside", False):
        return False
    return asyncio._get_running_loop() is not None


def _allowed_here(allowed: tuple[tuple[str, str], ...] = _MAY_WAIT_IN) -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename.replace("\\", "/")
        for suffix, func in allowed:
            if frame.f_code.co_name == func and name.endswith(suffix):
                return True
        frame = frame.f_back
    return False


def _violation(what: str) -> None:
    violations.append(what)
    raise BlockingCallError(f"blocking call on the event loop: {what}")


def _wrap(owner: Any, name: str, blocks: Callable[..., bool], describe: Callable[..., str], waits: bool = False) -> None:
    """Replace owner.name with a wrapper that refuses the call when it would
    block (blocks(*args)) on a guarded loop's thread."""
    original = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _guarding():
            _local.inside = True
            try:
                refuse = blocks(*args, **kwargs) and not (waits and _allowed_here())
                what = describe(*args, **kwargs) if refuse else ""
            finally:
                _local.inside = False
            if refuse:
                _violation(what)
        return original(*args, **kwargs)

    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    wrapper.__name__ = getattr(original, "__name__", name)
    setattr(owner, name, wrapper)


def _always(*_: Any, **__: Any) -> bool:
    return True


def _named(what: str) -> Callable[..., str]:
    def describe(*args: Any, **_: Any) -> str:
        shown = ", ".join(repr(a) for a in args[:2])
        return f"{what}({shown})"

    return describe


def _socket_blocks(sock: Any, *_: Any, **__: Any) -> bool:
    return sock.gettimeout() != 0.0


def _socket_call(what: str) -> Callable[..., str]:
    def describe(sock: Any, *args: Any, **_: Any) -> str:
        return f"{what} on a blocking socket ({sock.gettimeout()!r} s timeout){' to ' + repr(args[0]) if what.endswith('connect') and args else ''}"

    return describe


class _GuardedLock:
    """threading.Lock() as the guard makes it: acquire refuses to wait."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = _original_allocate()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if blocking and timeout != 0 and self._lock.locked() and _guarding() and not _allowed_here():
            _violation("threading.Lock.acquire of a held lock")
        return self._lock.acquire(blocking, timeout)

    __enter__ = acquire

    def __exit__(self, *exc: Any) -> None:
        self._lock.release()

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()

    def _at_fork_reinit(self) -> None:
        self._lock._at_fork_reinit()


_original_allocate = _thread.allocate_lock

_AUDITED = frozenset(
    {
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "socket.gethostbyaddr",
        "socket.getnameinfo",
        "subprocess.Popen",
        "os.system",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.exec",
    }
)


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _guarding():
        return
    if event in _AUDITED:
        if event == "subprocess.Popen" and _allowed_here(_MAY_SPAWN_IN):
            return
        _violation(f"{event}{args[:2]!r}")
    elif event == "open":
        path = args[0]
        if isinstance(path, int):
            return  # os.fdopen of a descriptor already open
        if isinstance(path, bytes):
            path = path.decode(errors="replace")
        path = str(path)
        if not path.endswith(_MODULE_FILES) and "__pycache__" not in path:
            _violation(f"open({path!r})")


def install() -> None:
    """Install the wrappers and the audit hook (once per process)."""
    global _installed
    if _installed:
        return
    _installed = True
    for method in ("connect", "accept", "send", "sendall", "sendto", "sendmsg", "recv", "recv_into",
                   "recvfrom", "recvfrom_into", "recvmsg"):
        _wrap(socket.socket, method, _socket_blocks, _socket_call(f"socket.{method}"))
    for method in ("read", "write", "send", "recv", "sendall"):
        _wrap(ssl.SSLSocket, method, _socket_blocks, _socket_call(f"ssl.SSLSocket.{method}"))
    for fn in ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr", "getnameinfo"):
        _wrap(socket, fn, _always, _named(f"socket.{fn}"))
    for fn in ("stat", "lstat", "listdir", "scandir", "access", "statvfs", "readlink", "getcwd", "mkdir",
               "rmdir", "unlink", "remove", "rename", "replace", "link", "symlink", "sendfile"):
        _wrap(os, fn, _always, _named(f"os.{fn}"))
    _wrap(os.path, "abspath", _always, _named("os.path.abspath"))
    _wrap(time, "sleep", _always, _named("time.sleep"))
    _wrap(threading.Condition, "wait", _always, _named("threading.Condition.wait"), waits=True)
    _wrap(threading.Condition, "wait_for", _always, _named("threading.Condition.wait_for"), waits=True)
    _wrap(threading.Event, "wait", lambda ev, *_, **__: not ev.is_set(), _named("threading.Event.wait"), waits=True)
    _wrap(threading.Thread, "join", lambda th, *_, **__: th.is_alive(), _named("threading.Thread.join"), waits=True)
    for method in ("result", "exception"):
        _wrap(concurrent.futures.Future, method, lambda f, *_, **__: not f.done(),
              _named(f"concurrent.futures.Future.{method}"), waits=True)
    threading.Lock = _GuardedLock  # type: ignore[misc,assignment]
    sys.addaudithook(_audit)


@contextlib.contextmanager
def guarded() -> Iterator[list[str]]:
    """Guard every running event loop's thread while the block runs; yields
    the violations recorded meanwhile (also raised where they happen)."""
    global _active
    install()
    start = len(violations)
    seen: list[str] = []
    _active += 1
    try:
        yield seen
    finally:
        _active -= 1
        seen.extend(violations[start:])

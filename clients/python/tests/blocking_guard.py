"""A blocking-call guard for an event loop, in the manner of blockbuster.

While :func:`guarded` is active, a blocking call made on the loop's thread
while the loop runs raises :class:`BlockingCallError` (and is recorded in
``violations``): a blocking ``socket.connect`` (non-blocking sockets, which
asyncio uses, are fine), name resolution, sending on a blocking socket,
starting processes, opening files (except the module files an import
reads), and ``time.sleep``. Everything but time.sleep is seen through an
audit hook (sys.addaudithook); time.sleep has no audit event, so it is
patched. Audit hooks cannot be removed, so the hook is installed once per
process and gated by the active state.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from typing import Any, Iterator, Optional

__all__ = ["BlockingCallError", "guarded", "violations"]


class BlockingCallError(RuntimeError):
    """A blocking call on a running event loop's thread."""


violations: list[str] = []

_loop: Optional[asyncio.AbstractEventLoop] = None
_thread: Optional[int] = None
_installed = False
_original_sleep = time.sleep

_ALWAYS = frozenset(
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
    }
)
_BLOCKING_SOCKET = frozenset({"socket.connect", "socket.sendto", "socket.sendmsg"})
_MODULE_FILES = (".py", ".pyc", ".so", ".pth", ".pyi")


def _on_loop() -> bool:
    loop = _loop
    return loop is not None and threading.get_ident() == _thread and loop.is_running()


def _violation(what: str) -> None:
    violations.append(what)
    raise BlockingCallError(f"blocking call on the event loop: {what}")


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if _loop is None or not _on_loop():
        return
    if event in _ALWAYS:
        _violation(f"{event}{args[:2]!r}")
    elif event in _BLOCKING_SOCKET:
        sock = args[0]
        if sock.gettimeout() != 0.0:  # blocking (None) or with a timeout
            _violation(f"{event} on a blocking socket to {args[1]!r}")
    elif event == "open":
        path = args[0]
        if isinstance(path, bytes):
            path = path.decode(errors="replace")
        if isinstance(path, str) and not path.endswith(_MODULE_FILES) and "__pycache__" not in path:
            _violation(f"open({path!r})")


def _sleep(seconds: float) -> None:
    if _on_loop() and seconds > 0:
        _violation(f"time.sleep({seconds!r})")
    _original_sleep(seconds)


def install() -> None:
    global _installed
    if not _installed:
        sys.addaudithook(_hook)
        time.sleep = _sleep
        _installed = True


@contextlib.contextmanager
def guarded() -> Iterator[list[str]]:
    """Guard the running loop (call from a coroutine); yields the violations
    recorded meanwhile."""
    global _loop, _thread
    install()
    if _loop is not None:
        raise RuntimeError("the guard is already active")
    start = len(violations)
    seen: list[str] = []
    _loop, _thread = asyncio.get_running_loop(), threading.get_ident()
    try:
        yield seen
    finally:
        _loop, _thread = None, None
        seen.extend(violations[start:])

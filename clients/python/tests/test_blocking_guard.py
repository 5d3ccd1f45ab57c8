"""The blocking-call guard's own tests: it refuses each blocking call that
blockbuster refuses on a running loop's thread, and lets asyncio's own I/O,
work handed to threads, and everything off the loop through. (No server.)"""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import os
import pathlib
import socket
import subprocess
import threading
import time
from typing import Any, Callable

import pytest

import blocking_guard

blocking_guard.install()  # before the tests make their locks


@pytest.fixture(scope="module")
def data_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("guard") / "data.txt"
    path.write_text("data")
    return str(path)


@pytest.fixture(scope="module")
def listener() -> Any:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    yield srv
    srv.close()


def _on_guarded_loop(fn: Callable[[], Any]) -> list[str]:
    """Call fn on a guarded running loop; the violations recorded."""

    async def main() -> list[str]:
        with blocking_guard.guarded() as seen:
            try:
                fn()
            except blocking_guard.BlockingCallError:
                pass
        return seen

    return asyncio.run(main())


def _blocking_cases(data_file: str, listener: Any) -> dict[str, Callable[[], Any]]:
    port = listener.getsockname()[1]

    peers: list[socket.socket] = []

    def connected() -> socket.socket:
        a, b = socket.socketpair()  # blocking, as sockets are made
        peers.append(b)
        return a

    def connect_with_timeout() -> None:
        s = socket.socket()
        s.settimeout(1)
        s.connect(("127.0.0.1", port))

    def held_lock() -> Callable[[], Any]:
        lock = threading.Lock()
        lock.acquire()
        return lambda: lock.acquire(timeout=0.05)

    live = threading.Thread(target=time.sleep, args=(0.3,))
    pending: concurrent.futures.Future[int] = concurrent.futures.Future()
    cond = threading.Condition()

    def wait_cond() -> None:
        with cond:
            cond.wait(0.01)

    def start_live_and_join() -> None:
        live.start()  # allowed: the start of a thread
        live.join(0.01)  # refused: waits for it

    return {
        "socket.connect (blocking)": lambda: socket.socket().connect(("127.0.0.1", port)),
        "socket.connect (timeout)": connect_with_timeout,
        "socket.send": lambda: connected().send(b"x"),
        "socket.sendall": lambda: connected().sendall(b"x"),
        "socket.recv": lambda: connected().recv(1),
        "socket.accept": listener.accept,
        "socket.getaddrinfo": lambda: socket.getaddrinfo("localhost", 80),
        "socket.gethostbyname": lambda: socket.gethostbyname("localhost"),
        "os.stat": lambda: os.stat(data_file),
        "os.lstat": lambda: os.lstat(data_file),
        "os.listdir": lambda: os.listdir(os.path.dirname(data_file)),
        "os.scandir": lambda: list(os.scandir(os.path.dirname(data_file))),
        "os.path.exists": lambda: os.path.exists(data_file),
        "os.path.isfile": lambda: os.path.isfile(data_file),
        "pathlib.Path.exists": lambda: pathlib.Path(data_file).exists(),
        "open": lambda: open(data_file).close(),
        "io.open": lambda: io.open(data_file, "rb").close(),
        "os.open": lambda: os.close(os.open(data_file, os.O_RDONLY)),
        "time.sleep": lambda: time.sleep(0.01),
        "threading.Event.wait": lambda: threading.Event().wait(0.01),
        "threading.Condition.wait": wait_cond,
        "threading.Thread.join": start_live_and_join,
        "concurrent.futures.Future.result": lambda: pending.result(timeout=0.01),
        "threading.Lock.acquire (held)": held_lock(),
        "subprocess.Popen": lambda: subprocess.run(["true"], check=False),
        "os.system": lambda: os.system("true"),
    }


CASES = [
    "socket.connect (blocking)", "socket.connect (timeout)", "socket.send", "socket.sendall", "socket.recv",
    "socket.accept", "socket.getaddrinfo", "socket.gethostbyname", "os.stat", "os.lstat", "os.listdir",
    "os.scandir", "os.path.exists", "os.path.isfile", "pathlib.Path.exists", "open", "io.open", "os.open",
    "time.sleep", "threading.Event.wait", "threading.Condition.wait", "threading.Thread.join",
    "concurrent.futures.Future.result", "threading.Lock.acquire (held)", "subprocess.Popen", "os.system",
]


@pytest.mark.parametrize("case", CASES)
def test_the_guard_refuses_each_blocking_call(case: str, data_file: str, listener: Any) -> None:
    fn = _blocking_cases(data_file, listener)[case]
    assert len(_on_guarded_loop(fn)) >= 1, f"{case} passed the guard"


@pytest.mark.parametrize("case", CASES)
def test_the_same_calls_pass_off_the_loop(case: str, data_file: str, listener: Any) -> None:
    """Off the loop (here, and in a worker thread of a guarded loop) each is fine."""
    fn = _blocking_cases(data_file, listener)[case]
    if case in ("socket.accept", "socket.recv"):
        return  # they would really wait: no peer
    with blocking_guard.guarded() as seen:
        try:
            fn()
        except OSError:
            pass  # a refused connection is not the guard's

    async def in_a_thread() -> list[str]:
        with blocking_guard.guarded() as seen:
            try:
                await asyncio.to_thread(_blocking_cases(data_file, listener)[case])
            except OSError:
                pass
        return seen

    assert seen == [] and asyncio.run(in_a_thread()) == []


def test_asyncio_io_passes(listener: Any) -> None:
    """asyncio's own sockets (non-blocking), sleeps, executors, threads and
    done futures pass the guard."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()

    async def main() -> tuple[list[str], bytes]:
        with blocking_guard.guarded() as seen:
            server = await asyncio.start_server(echo, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"ping\n")
            await writer.drain()
            line = await reader.readline()
            writer.close()
            await writer.wait_closed()
            server.close()
            await server.wait_closed()
            await asyncio.sleep(0.01)
            await asyncio.to_thread(time.sleep, 0.01)
            await asyncio.get_running_loop().run_in_executor(None, os.stat, ".")
            done: concurrent.futures.Future[int] = concurrent.futures.Future()
            done.set_result(1)
            assert done.result() == 1
            assert await asyncio.wrap_future(done) == 1
            ev = threading.Event()
            ev.set()
            assert ev.wait()
            a, b = socket.socketpair()
            a.setblocking(False)
            b.setblocking(False)
            a.send(b"x")
            assert b.recv(1) == b"x"
            a.close()
            b.close()
        return seen, line

    seen, line = asyncio.run(main())
    assert (seen, line) == ([], b"ping\n")

"""Processes, terminals and watches against a live server (local provider:
real bubblewrap sandboxes), sync and async."""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any, Iterator, Union

import httpx
import pytest

from conftest import KEY, LABELS, URL, live, wait_for
from tether_sandbox import (
    AsyncTether,
    FileChange,
    ProcessEnded,
    ProcessOutput,
    ProcessStarted,
    Tether,
    TetherError,
    WatchStarted,
)

pytestmark = live


def _read_until(events: Iterator[Any], text: list[str], want: str) -> Union[ProcessEnded, None]:
    """Read output events, gathering their text into text[0], until it
    holds want (None) or the process ended (its ProcessEnded)."""
    for ev in events:
        if isinstance(ev, ProcessOutput):
            text[0] += ev.data
            if want and want in text[0]:
                return None
        elif isinstance(ev, ProcessEnded):
            return ev
    raise AssertionError(f"the stream ended before {want!r}; output {text[0]!r}")


def test_dev_server_watch_second_client_and_sigterm(client: Tether):
    """A dev server started in the background is followed from its start
    by a second client, a watch sees a file written through the files
    API, and SIGTERM ends the server: both the stream and a wait read it."""
    sb = client.wait_sandbox(client.create_sandbox(provider="local", labels=LABELS).id, timeout=60)
    try:
        caps = {p.name: p.capabilities for p in client.providers()}["local"]
        assert (caps.processes, caps.pty, caps.watch) == (True, True, True)

        # The watch runs in a thread, with a client of its own, until the
        # sandbox ends (its error ends the stream).
        changes: queue.Queue = queue.Queue()

        def follow() -> None:
            try:
                with Tether(URL, KEY) as watcher:
                    for ev in watcher.watch(sb.id, "/workspace", recursive=True):
                        changes.put(ev)
            except Exception as err:  # noqa: BLE001 - handed to the test
                changes.put(err)

        threading.Thread(target=follow, daemon=True).start()
        assert changes.get(timeout=30) == WatchStarted("/workspace", True)

        server = client.start_process(
            sb.id, "python3 -m http.server 8000 --bind 127.0.0.1",
            env={"PYTHONUNBUFFERED": "1"}, cwd="/workspace", tag="devserver",
        )
        assert (server.running, server.tag, server.cwd, server.exit) == (True, "devserver", "/workspace", None)
        assert server.argv == ["sh", "-c", "python3 -m http.server 8000 --bind 127.0.0.1"]

        client.write_file(sb.id, "/workspace/index.html", b"hello from the files API")
        seen = []
        while not any(c.path == "index.html" and c.kind in ("create", "write") for c in seen):
            ev = changes.get(timeout=30)
            assert isinstance(ev, FileChange), ev
            seen.append(ev)
        assert seen[-1].at is not None and not seen[-1].is_dir

        headers = {"Authorization": f"Bearer {KEY}"}
        url = client.port_url(sb.id, 8000, "/index.html")
        got, _ = wait_for(lambda: httpx.get(url, headers=headers), lambda r: r.status_code == 200, 30, "served")
        assert got.text == "hello from the files API"

        # A second client attaches from the start: the server's banner, then
        # the request it logged.
        with Tether(URL, KEY) as other:
            events = other.process_output(sb.id, "devserver", from_start=True)
            assert next(events) == ProcessStarted(server.pid)
            text = [""]
            assert _read_until(events, text, '"GET /index.html HTTP/1.1" 200') is None
            assert "Serving HTTP on 127.0.0.1 port 8000" in text[0]

            client.signal_process(sb.id, "devserver", "TERM")
            ended = _read_until(events, text, "")
            assert ended is not None, text[0]
            assert ended.exit.code == 143 or (ended.exit.code, ended.exit.signal, ended.exit.exited) == (-1, 15, False), ended

        done = client.wait_process(sb.id, server.pid, timeout=30)
        assert (done.running, done.exit) == (False, ended.exit)
        assert server.pid in [p.pid for p in client.list_processes(sb.id)]

        with pytest.raises(TetherError) as ctx:
            client.signal_process(sb.id, server.pid, "KILL")
        assert (ctx.value.code, ctx.value.status) == ("PROCESS_STATE_CONFLICT", 409)
        with pytest.raises(TetherError) as ctx:
            client.get_process(sb.id, "nosuchtag")
        assert (ctx.value.code, ctx.value.status) == ("PROCESS_NOT_FOUND", 404)
    finally:
        client.delete_sandbox(sb.id)
    ended_watch = changes.get(timeout=30)
    while isinstance(ended_watch, FileChange):
        ended_watch = changes.get(timeout=30)
    assert isinstance(ended_watch, TetherError), ended_watch


def test_terminal_through_output_stdin_and_resize(client: Tether):
    """The Python client's terminal: a process with pty, its screen from
    the output stream ("pty" chunks), keystrokes through write_stdin, and
    resize_process; a full-screen vi sees the new size and writes its file."""
    sb = client.wait_sandbox(client.create_sandbox(provider="local", labels=LABELS).id, timeout=60)
    try:
        p = client.start_process(sb.id, argv=["sh"], pty=(24, 80), env={"PS1": "$ "})
        assert p.pty == (24, 80)
        events = client.process_output(sb.id, p.pid, from_start=True)
        screen = [""]
        client.write_stdin(sb.id, p.pid, "stty size\r")
        assert _read_until(events, screen, "24 80") is None

        # vi draws its empty lines, a tilde then spaces to the width; once
        # resized, it draws them again 100 wide.
        client.write_stdin(sb.id, p.pid, "vi /workspace/typed.txt\r")
        assert _read_until(events, screen, "~" + " " * 79) is None
        screen[0] = ""
        client.resize_process(sb.id, p.pid, 30, 100)
        assert _read_until(events, screen, "~" + " " * 99) is None
        client.write_stdin(sb.id, p.pid, ":!stty size\r")  # vi's shell sees the new size
        assert _read_until(events, screen, "Press ENTER") is None
        assert "30 100\r\n" in screen[0]
        screen[0] = ""
        client.write_stdin(sb.id, p.pid, "\r")
        client.write_stdin(sb.id, p.pid, "ihello from vi\x1b:wq\r")
        assert _read_until(events, screen, "written") is None
        assert _read_until(events, screen, "\x1b[?1049l") is None  # vi left the alternate screen
        assert client.read_file(sb.id, "/workspace/typed.txt") == b"hello from vi\n"

        client.write_stdin(sb.id, p.pid, "exit 3\r")
        ended = _read_until(events, screen, "")
        assert ended is not None and (ended.exit.code, ended.exit.exited) == (3, True)
        with pytest.raises(TetherError) as ctx:
            client.resize_process(sb.id, p.pid, 10, 10)
        assert ctx.value.code == "PROCESS_STATE_CONFLICT"
    finally:
        client.delete_sandbox(sb.id)


def test_processes_and_watch_async():
    """AsyncTether: a process with stdin followed from its start, input
    and end of input, its exit from the stream and a wait; a watch sees a
    file an exec wrote."""

    async def read_until(events: Any, text: list[str], want: str) -> Union[ProcessEnded, None]:
        async for ev in events:
            if isinstance(ev, ProcessOutput):
                text[0] += ev.data
                if want and want in text[0]:
                    return None
            elif isinstance(ev, ProcessEnded):
                return ev
        raise AssertionError(f"the stream ended before {want!r}; output {text[0]!r}")

    async def run() -> None:
        async with AsyncTether(URL, KEY) as a:
            sb = await a.wait_sandbox((await a.create_sandbox(provider="local", labels=LABELS)).id, timeout=60)
            try:
                p = await a.start_process(
                    sb.id, "echo ready; while read line; do echo got:$line; done; echo eof >&2; exit 7",
                    stdin=True, tag="reader",
                )
                assert p.stdin and p.running
                events = a.process_output(sb.id, "reader", from_start=True)
                text = [""]
                assert await read_until(events, text, "ready\n") is None
                await a.write_stdin(sb.id, p.pid, "one\n")
                assert await read_until(events, text, "got:one\n") is None
                await a.close_stdin(sb.id, "reader")
                ended = await read_until(events, text, "")
                assert ended is not None and (ended.exit.code, ended.exit.exited) == (7, True)
                assert text[0] == "ready\ngot:one\neof\n"
                done = await a.wait_process(sb.id, "reader", timeout=10)
                assert (done.running, done.exit.code) == (False, 7)
                assert [x.pid for x in await a.list_processes(sb.id)] == [p.pid]
                with pytest.raises(TetherError) as ctx:
                    await a.write_stdin(sb.id, p.pid, "late\n")
                assert (ctx.value.code, ctx.value.status) == ("PROCESS_STATE_CONFLICT", 409)
                with pytest.raises(TetherError) as ctx:
                    await a.get_process(sb.id, 999999)
                assert (ctx.value.code, ctx.value.status) == ("PROCESS_NOT_FOUND", 404)

                watch = a.watch(sb.id, "/workspace")
                assert await watch.__anext__() == WatchStarted("/workspace", False)
                await a.exec(sb.id, "echo hi > /workspace/from-exec.txt")
                async for ch in watch:
                    assert isinstance(ch, FileChange)
                    if ch.path == "from-exec.txt" and ch.kind in ("create", "write"):
                        break
                await watch.aclose()
            finally:
                await a.delete_sandbox(sb.id)

    asyncio.run(asyncio.wait_for(run(), 120))

"""TetherProvider and TetherSandbox against a live Tether with real local
(bubblewrap) sandboxes: the dcode stories of the issue "dcode plugs in"."""

from __future__ import annotations

import asyncio
import concurrent.futures
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest

import blocking_guard
from conftest import (
    JANITOR_INTERVAL,
    KEY,
    LABELS,
    URL,
    child_env,
    live,
    new_marker,
    running,
    wait_for,
    wait_gone,
)
from tether_sandbox import (
    AsyncTether,
    ExecExit,
    Tether,
    TetherError,
    TetherProvider,
    TetherSandbox,
    TetherClosedError,
    TetherSandboxNotFoundError,
)
from tether_sandbox._compat import SandboxError

pytestmark = live

PROBE = "printf 'OPEN_SANDBOX_ALIVE\\n'"


# -- 1. a guarded event loop ---------------------------------------------------


def test_async_provider_never_blocks_the_event_loop():
    """aget_or_create, aexecute, file transfers, streaming and adelete run on
    a loop whose blocking-call guard records no violation."""

    async def main() -> tuple[list[str], dict]:
        with blocking_guard.guarded() as violations:
            provider = TetherProvider(URL, KEY, provider="local", owner_ttl=5, labels=LABELS)
            sb = await provider.aget_or_create()
            res = await sb.aexecute(PROBE)
            up = await sb.aupload_files([("/workspace/g.txt", b"guarded"), ("/etc/nope", b"x")])
            down = await sb.adownload_files(["/workspace/g.txt", "/workspace/missing"])
            streamed = [ev async for ev in sb.astream("echo streamed")]
            await asyncio.sleep(provider.owner_ttl / 3 + 0.5)  # a heartbeat or two on the loop
            await sb.arefresh()
            await provider.adelete(sandbox_id=sb.id)
            await provider.aclose()
        return violations, {"res": res, "up": up, "down": down, "streamed": streamed, "state": sb.info.state}

    violations, got = asyncio.run(main())
    assert violations == []
    assert (got["res"].output, got["res"].exit_code, got["res"].truncated) == ("OPEN_SANDBOX_ALIVE\n", 0, False)
    assert [u.error for u in got["up"]] == [None, "invalid_path"]
    assert [(d.content, d.error) for d in got["down"]] == [(b"guarded", None), (None, "file_not_found")]
    assert isinstance(got["streamed"][-1], ExecExit) and got["streamed"][-1].result.output == "streamed\n"
    assert got["state"] == "ready"


# -- 2. cancelled startup ------------------------------------------------------


def test_cancelled_startup_deletes_the_sandbox():
    """Cancelled while the sandbox is still creating (a slow setup):
    CancelledError reaches the caller within 100 ms; the sandbox ends
    cancelled and released with no process left on the host."""
    marker = f"sleep 3.{uuid.uuid4().int % 10_000_000:07d}"

    async def main() -> tuple[float, str]:
        provider = TetherProvider(URL, KEY, provider="local", owner_ttl=10, labels=LABELS)
        a = AsyncTether(URL, KEY)
        try:
            task = asyncio.ensure_future(provider.aget_or_create(setup=marker))
            deadline = time.monotonic() + 30
            while True:  # until the setup script runs on the host
                page = await a.list_sandboxes(owner=provider.owner)
                if page.items and page.items[0].state == "creating" and await asyncio.to_thread(running, marker):
                    break
                assert not task.done(), task
                assert time.monotonic() < deadline, "the sandbox never started its setup"
                await asyncio.sleep(0.05)
            sandbox_id = page.items[0].id
            t0 = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            took = time.monotonic() - t0
            await provider.wait_cleanups(timeout=10)
            sb = await a.wait_sandbox(sandbox_id, until="released", timeout=30)
            assert (sb.state, sb.released) == ("cancelled", True), sb
            await asyncio.to_thread(wait_gone, marker)
            with pytest.raises(TetherError) as ctx:
                await a.exec(sandbox_id, PROBE)
            assert (ctx.value.code, ctx.value.status, ctx.value.state) == ("SANDBOX_STATE_CONFLICT", 409, "cancelled")
            return took, sandbox_id
        finally:
            await provider.aclose()
            await a.aclose()

    took, _ = asyncio.run(main())
    assert took < 0.1, f"CancelledError took {took * 1000:.0f} ms to reach the caller"


def test_cancelled_before_the_create_answered(client: Tether):
    """Cancelled right away, maybe before the create reached the server: the
    Idempotency-Key replay finds (or makes) the sandbox and ends it."""

    async def main() -> str:
        provider = TetherProvider(URL, KEY, provider="local", owner_ttl=10, labels=LABELS)
        try:
            task = asyncio.ensure_future(provider.aget_or_create())
            await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await provider.wait_cleanups(timeout=10)
            return provider.owner
        finally:
            await provider.aclose()

    owner = asyncio.run(main())
    items = client.list_sandboxes(owner=owner).items
    assert len(items) <= 1 and all(sb.terminal for sb in items), items


# -- 3. owner death ------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import asyncio, atexit, sys, time
    from tether_sandbox import TetherProvider

    mode, marker, labels = sys.argv[1], sys.argv[2], {"tether-sandbox-test": sys.argv[3]}
    atexit.register(lambda: print("ATEXIT RAN", flush=True))
    provider = TetherProvider(provider="local", owner_ttl=3, labels=labels)
    if mode == "sync":   # heartbeats from a daemon thread
        sb = provider.get_or_create()
        sb.execute(marker + " >/dev/null 2>&1 &")
        print(sb.id, flush=True)
        time.sleep(3600)
    else:                # heartbeats from an asyncio task
        async def main():
            sb = await provider.aget_or_create()
            await sb.aexecute(marker + " >/dev/null 2>&1 &")
            print(sb.id, flush=True)
            await asyncio.sleep(3600)
        asyncio.run(main())
    """
)


def _spawn(args: list[str], **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", *args], env=child_env(), text=True, **kw)


def test_owner_death_ends_its_sandboxes(client: Tether):
    """A child that made a sandbox is killed with SIGKILL (sync provider,
    heartbeat thread), another with SIGTERM and no atexit handler run (async
    provider, heartbeat task): both sandboxes end owner_expired within the
    lease plus one janitor interval, and their processes leave the host."""
    ttl = 3
    children = []
    try:
        for mode, sig in (("sync", signal.SIGKILL), ("async", signal.SIGTERM)):
            marker = new_marker()
            child = _spawn([CHILD, mode, marker, LABELS["tether-sandbox-test"]], stdout=subprocess.PIPE)
            children.append((child, sig, marker))
        ids = []
        for child, _, marker in children:
            sandbox_id = child.stdout.readline().strip()
            assert sandbox_id.startswith("sbx_"), sandbox_id
            assert running(marker)
            ids.append(sandbox_id)
        # The heartbeats keep them alive past the lease and a janitor pass.
        time.sleep(ttl + JANITOR_INTERVAL + 0.5)
        assert [client.get_sandbox(i).state for i in ids] == ["ready", "ready"]
        for child, sig, _ in children:
            child.send_signal(sig)
        killed = time.monotonic()
        for child, sig, _ in children:
            child.wait(timeout=10)
            assert child.returncode == -sig
            assert "ATEXIT RAN" not in child.stdout.read()
    finally:
        for child, _, _ in children:
            if child.poll() is None:
                child.kill()
                child.wait()
            child.stdout.close()
    # Each sandbox's end is timed on its own, both watched at once: waiting
    # for one's release, and for its processes to leave the host, must not
    # count against the other (it did, and made this test flaky).
    ended: dict[str, tuple[object, float]] = {}
    while len(ended) < len(ids):
        for sandbox_id in ids:
            if sandbox_id not in ended and (sb := client.get_sandbox(sandbox_id)).terminal:
                ended[sandbox_id] = (sb, time.monotonic() - killed)
        assert time.monotonic() - killed < ttl + JANITOR_INTERVAL + 10, f"never ended: {set(ids) - set(ended)}"
        time.sleep(0.05)
    for sandbox_id, (_, sig, _) in zip(ids, children):
        sb, took = ended[sandbox_id]
        assert (sb.state, sb.reason) == ("terminated", "owner_expired")
        # The lease was renewed at most ttl/3 before the kill; one janitor
        # interval, and slack for a loaded machine.
        assert took <= ttl + JANITOR_INTERVAL + 3, f"the sandbox of the owner killed by {sig.name} outlived it by {took:.1f}s"
    for sandbox_id, (_, _, marker) in zip(ids, children):
        assert client.wait_sandbox(sandbox_id, until="released", timeout=30).released
        wait_gone(marker)


# -- 4. reattach -----------------------------------------------------------------

FIRST = textwrap.dedent(
    """
    import sys
    from tether_sandbox import TetherProvider

    provider = TetherProvider(provider="local", owner_ttl=3, labels={"tether-sandbox-test": sys.argv[1]})
    sb = provider.get_or_create()
    print(sb.id, provider.owner, flush=True)
    sys.stdin.readline()   # until told to go; then exit without close()
    """
)


def test_reattach_adopts_the_sandbox(client: Tether, provider: TetherProvider):
    """A second process reattaches by id with adopt=True and adopts the
    sandbox; the first exits; the sandbox lives on under the new owner past
    the old lease. (Without adopt, see test_dcode's --sandbox-id test.)"""
    first = _spawn([FIRST, LABELS["tether-sandbox-test"]], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        sandbox_id, first_owner = first.stdout.readline().split()
        assert client.get_sandbox(sandbox_id).owner == first_owner
        try:
            sb = provider.get_or_create(sandbox_id=sandbox_id, adopt=True)
        except TetherError as err:
            if err.code == "NOT_FOUND" and err.detail.startswith("no route") or err.status == 405:
                client.delete_sandbox(sandbox_id)
                pytest.xfail(f"PUT /v1/sandboxes/{{id}}/owner (owner transfer) is not on this server yet: {err}")
            raise
        assert isinstance(sb, TetherSandbox) and sb.id == sandbox_id
        assert sb.info.owner == provider.owner != first_owner
        first.stdin.close()
        assert first.wait(timeout=10) == 0
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        first.stdout.close()
    time.sleep(3 + JANITOR_INTERVAL + 1)  # the first owner's lease lapsed and a janitor pass ran
    info = sb.refresh()
    assert (info.state, info.owner) == ("ready", provider.owner)
    assert sb.execute(PROBE).output == "OPEN_SANDBOX_ALIVE\n"
    assert client.get_sandbox(sandbox_id).state == "ready"


def test_reattach_to_unknown_or_ended_sandboxes_is_not_found(client: Tether, provider: TetherProvider):
    with pytest.raises(TetherSandboxNotFoundError) as ctx:
        provider.get_or_create(sandbox_id="sbx_00000000000000000000000000")
    assert (ctx.value.code, ctx.value.status) == ("NOT_FOUND", 404)

    ended = client.create_sandbox(provider="sim", labels=LABELS)
    client.delete_sandbox(ended.id)
    with pytest.raises(TetherSandboxNotFoundError) as ctx:
        provider.get_or_create(sandbox_id=ended.id)
    assert ctx.value.state in ("cancelled", "terminated")

    async def attach() -> None:
        async with TetherProvider(URL, KEY, labels=LABELS) as p:
            await p.aget_or_create(sandbox_id=ended.id)

    with pytest.raises(TetherSandboxNotFoundError):
        asyncio.run(attach())


# -- 5. files --------------------------------------------------------------------


def test_file_errors_from_real_cases(provider: TetherProvider):
    sb = provider.get_or_create()
    setup = sb.execute("mkdir -p /workspace/ro /workspace/dir && chmod 555 /workspace/ro")
    assert setup.exit_code == 0, setup.output
    up = sb.upload_files(
        [
            ("/workspace/ok.txt", b"ok"),
            ("/workspace/ro/denied.txt", b"x"),  # a folder the sandbox user may not write
            ("/workspace/dir", b"x"),  # a directory
            ("/etc/outside.txt", b"x"),  # outside /workspace and /tmp
            ("../etc/outside.txt", b"x"),  # the same, relative
            ("/tmp/t.txt", b"tmp"),
        ]
    )
    assert [(u.path, u.error) for u in up] == [
        ("/workspace/ok.txt", None),
        ("/workspace/ro/denied.txt", "permission_denied"),
        ("/workspace/dir", "is_directory"),
        ("/etc/outside.txt", "invalid_path"),
        ("../etc/outside.txt", "invalid_path"),
        ("/tmp/t.txt", None),
    ]
    down = sb.download_files(["/workspace/missing.txt", "/workspace/dir", "/workspace/ok.txt", "dir", "/tmp/t.txt"])
    assert [(d.path, d.content, d.error) for d in down] == [
        ("/workspace/missing.txt", None, "file_not_found"),
        ("/workspace/dir", None, "is_directory"),
        ("/workspace/ok.txt", b"ok", None),
        ("dir", None, "is_directory"),
        ("/tmp/t.txt", b"tmp", None),
    ]
    assert sb.execute("ls /workspace/ro | wc -l").output.strip() == "0"  # nothing partial
    provider.delete(sandbox_id=sb.id)
    # The sandbox ended: still per file ("partial success, do not raise"),
    # as the failure's text, since no literal fits.
    late = sb.upload_files([("/workspace/late.txt", b"x"), ("/workspace/late2.txt", b"y")])
    assert [u.path for u in late] == ["/workspace/late.txt", "/workspace/late2.txt"]
    for u in late:
        assert "SANDBOX_STATE_CONFLICT" in u.error and "terminated" in u.error, u.error
    gone = sb.download_files(["/workspace/ok.txt"])
    assert gone[0].content is None and "SANDBOX_STATE_CONFLICT" in gone[0].error
    bad_key = TetherProvider(URL, "not-a-key", provider="local", labels=LABELS)
    try:
        stranger = TetherSandbox(bad_key, sb.info)
        denied = stranger.download_files(["/workspace/ok.txt"])
        assert denied[0].content is None and "UNAUTHENTICATED" in denied[0].error, denied
    finally:
        bad_key.close()


def test_relative_paths_are_taken_from_the_working_directory(provider: TetherProvider):
    """As a shell in /workspace would: a/b is /workspace/a/b, ./ and ../ are
    resolved; results carry the paths as given, sync and async."""
    sb = provider.get_or_create()
    assert sb.work_dir == "/workspace"
    up = sb.upload_files([("rel/a.txt", b"a"), ("./rel/b.txt", b"b"), ("rel/sub/../c.txt", b"c"), ("../tmp/d.txt", b"d")])
    assert [(u.path, u.error) for u in up] == [("rel/a.txt", None), ("./rel/b.txt", None), ("rel/sub/../c.txt", None), ("../tmp/d.txt", None)]
    for path, want in [("/workspace/rel/a.txt", b"a"), ("/workspace/rel/b.txt", b"b"), ("/workspace/rel/c.txt", b"c"), ("/tmp/d.txt", b"d")]:
        assert provider.client.read_file(sb.id, path) == want, path
    assert sb.execute("cat rel/a.txt rel/c.txt").output == "ac"  # commands run there too

    async def both() -> tuple:
        up = await sb.aupload_files([("arel/x.txt", b"x"), ("arel/../arel/y.txt", b"y")])
        down = await sb.adownload_files(["arel/x.txt", "./arel/y.txt", "arel/none", "arel"])
        return up, down

    aup, adown = asyncio.run(both())
    assert [(u.path, u.error) for u in aup] == [("arel/x.txt", None), ("arel/../arel/y.txt", None)]
    assert [(d.path, d.content, d.error) for d in adown] == [
        ("arel/x.txt", b"x", None),
        ("./arel/y.txt", b"y", None),
        ("arel/none", None, "file_not_found"),
        ("arel", None, "is_directory"),
    ]
    provider.delete(sandbox_id=sb.id)


def test_hundred_files_in_one_call_in_input_order(provider: TetherProvider):
    files = [(f"/workspace/many/{n:03d}-{uuid.uuid4().hex[:6]}.txt", f"file {n}\n".encode() * (n + 1)) for n in range(100)]
    files.reverse()  # input order is not sorted order
    sb = provider.get_or_create()

    async def transfer() -> tuple:
        up = await sb.aupload_files(files)
        down = await sb.adownload_files([p for p, _ in files])
        return up, down

    up, down = asyncio.run(transfer())
    assert [u.path for u in up] == [p for p, _ in files] and all(u.error is None for u in up)
    assert [(d.path, d.content, d.error) for d in down] == [(p, c, None) for p, c in files]
    assert sb.execute("ls /workspace/many | wc -l").output.strip() == "100"

    again = sb.upload_files([(p, c.upper()) for p, c in files])
    assert all(u.error is None for u in again)
    back = sb.download_files([p for p, _ in files])
    assert [(d.path, d.content) for d in back] == [(p, c.upper()) for p, c in files]
    provider.delete(sandbox_id=sb.id)


# -- 6. exec timeouts --------------------------------------------------------------


def test_execute_timeout_semantics(provider: TetherProvider):
    """timeout=0 is the server's maximum: sleep 2 is not killed; timeout=1
    kills sleep 5; None is the provider's exec_timeout (30 minutes; a short
    one configured here kills sleep 5)."""
    sb = provider.get_or_create()

    def timed(command: str, timeout):
        t0 = time.monotonic()
        res = sb.execute(command, timeout=timeout)
        return res, time.monotonic() - t0

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        unlimited = pool.submit(timed, "sleep 2; echo slept", 0)
        limited = pool.submit(timed, "sleep 5; echo slept", 1)
        default = pool.submit(timed, "echo default", None)
        (res0, took0), (res1, took1), (resd, _) = unlimited.result(), limited.result(), default.result()
    assert (res0.exit_code, res0.output) == (0, "slept\n") and took0 >= 2
    assert res1.exit_code == 124 and "slept" not in res1.output and "timed out" in res1.output
    assert took1 < 4, f"timeout=1 took {took1:.1f}s"
    assert (resd.exit_code, resd.output) == (0, "default\n")
    assert provider.client.exec(sb.id, "true", timeout=0).timeout_seconds > 60  # the server's maximum

    async def aexec():
        return await sb.aexecute("sleep 5", timeout=1)

    assert asyncio.run(aexec()).exit_code == 124
    short = TetherProvider(URL, KEY, provider="local", labels=LABELS, exec_timeout=1)
    try:
        res = TetherSandbox(short, sb.info).execute("sleep 5; echo slept")
        assert (res.exit_code, "slept" in res.output) == (124, False), res
    finally:
        short.close()
    assert provider.exec_timeout == 1800
    provider.delete(sandbox_id=sb.id)


def test_one_owner_lease_per_process(client: Tether):
    """Providers of one Tether, key and TTL share one owner and one
    heartbeat thread; closing one ends only its own sandboxes, the last
    ends the owner."""
    providers = [TetherProvider(URL, KEY, provider="local", owner_ttl=7, labels=LABELS) for _ in range(3)]
    other_ttl = TetherProvider(URL, KEY, provider="local", owner_ttl=8, labels=LABELS)
    try:
        owner = providers[0].owner
        assert [p.owner for p in providers] == [owner] * 3
        assert other_ttl.owner != owner, "another TTL is another lease, with an owner of its own"
        sandboxes = [p.get_or_create() for p in providers]
        assert [sb.info.owner for sb in sandboxes] == [owner] * 3
        beats = [t for t in threading.enumerate() if t.name == f"tether-lease-{owner}" and t.is_alive()]
        assert len(beats) == 1, [t.name for t in threading.enumerate()]
        time.sleep(7 + JANITOR_INTERVAL + 1)  # past the lease: the one heartbeat keeps all three
        assert [client.get_sandbox(sb.id).state for sb in sandboxes] == ["ready"] * 3

        providers[0].close()  # not the last: deletes its own sandbox only
        first = client.get_sandbox(sandboxes[0].id)
        assert (first.state, first.reason) == ("terminated", "requested")
        assert [client.get_sandbox(sb.id).state for sb in sandboxes[1:]] == ["ready", "ready"]
        asyncio.run(providers[1].aclose())
        assert client.get_sandbox(sandboxes[1].id).reason == "requested"
        assert client.get_sandbox(sandboxes[2].id).state == "ready"
        assert sum(t.name == f"tether-lease-{owner}" and t.is_alive() for t in threading.enumerate()) == 1
        providers[2].close()  # the last: ends the owner
        last = client.get_sandbox(sandboxes[2].id)
        assert (last.state, last.reason) == ("terminated", "owner_released")
        wait_for(lambda: [t for t in threading.enumerate() if t.name == f"tether-lease-{owner}"], lambda ts: not ts, 10, "the heartbeat to stop")
        again = TetherProvider(URL, KEY, provider="local", owner_ttl=7, labels=LABELS)
        assert again._lease is not providers[0]._lease  # a new lease (the old one ended)
        again.close()
    finally:
        for p in providers + [other_ttl]:
            p.close()


def test_close_ends_the_owners_sandboxes(client: Tether):
    provider = TetherProvider(URL, KEY, provider="local", owner_ttl=30, labels=LABELS)
    a, b = provider.get_or_create(), provider.get_or_create()
    provider.close()
    for sb in (a, b):
        info = client.get_sandbox(sb.id)
        assert (info.state, info.reason) == ("terminated", "owner_released")
    with pytest.raises(RuntimeError):
        provider.get_or_create()
    # After close(), the sandboxes fail at once, without a request, with
    # dcode's SandboxError (code NOT_INITIALIZED, deepagents' code for it).
    calls = [
        lambda: a.execute("true"),
        lambda: a.upload_files([("/workspace/x", b"x")]),
        lambda: a.download_files(["/workspace/x"]),
        lambda: asyncio.run(a.aexecute("true")),
        lambda: asyncio.run(a.aupload_files([("/workspace/x", b"x")])),
        lambda: asyncio.run(a.adownload_files(["/workspace/x"])),
        lambda: provider.get_or_create(),
    ]
    for call in calls:
        with pytest.raises(TetherClosedError) as err:
            call()
        assert isinstance(err.value, SandboxError) and isinstance(err.value, TetherError)
        assert (err.value.code, err.value.status) == ("NOT_INITIALIZED", 0)

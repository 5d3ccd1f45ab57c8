"""dcode's startup with ``--sandbox tether``, step by step, against a live
Tether with real local (bubblewrap) sandboxes.

dcode (deepagents-code) cannot be installed here (no PyPI), so
:func:`dcode_create_sandbox` is a stand-in written from its source
(``deepagents_code/integrations/sandbox_factory.py: create_sandbox`` and
``server_graph.py: _make_graph``, 0.1.59; 0.1.65 of the bug report runs the
same path). What it does, in order:

1. ``_make_graph`` is a coroutine on ``langgraph dev``'s loop, which arms
   blockbuster: here :mod:`blocking_guard`.
2. The provider registry: the class named by the config table's
   ``class_path`` (or the entry point), instantiated with no arguments; the
   table's ``params`` are the keyword arguments of ``get_or_create``.
3. ``provider.get_or_create(sandbox_id=..., **params)``, the *sync* one, on
   the loop (0.1.59-0.1.65), or inside ``asyncio.to_thread`` (the later fix).
4. It prints ``backend.id``; with ``--sandbox-setup`` it runs
   ``backend.execute("bash -c ...")``, untimed, still on the loop.
5. At exit (atexit), ``provider.delete(sandbox_id=backend.id)`` only if it
   created the sandbox (never for ``--sandbox-id``).
6. Meanwhile the agent's tools: the async ones on the loop (aexecute,
   aupload_files, adownload_files; deepagents' BaseSandbox has als, aread,
   awrite, ... call aexecute/aupload_files, or run the sync tools in
   asyncio.to_thread), the sync ones in worker threads.
"""

from __future__ import annotations

import asyncio
import importlib
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import timezone
from pathlib import Path
from typing import Any, Optional

import pytest

import blocking_guard
from conftest import JANITOR_INTERVAL, KEY, LABELS, URL, child_env, live, new_marker, running, wait_for, wait_gone
from tether_sandbox import Tether, TetherError, TetherLoopBlockedError, TetherProvider, TetherSandboxNotFoundError

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = None  # type: ignore[assignment]

pytestmark = live

PROBE = "printf 'OPEN_SANDBOX_ALIVE\\n'"
README = Path(__file__).resolve().parents[1] / "README.md"


def readme_config() -> dict[str, Any]:
    """The ``[sandboxes.providers.tether]`` table of the README's dcode
    config snippet, as dcode's registry reads it."""
    text = README.read_text()
    m = re.search(r"```toml\n(# ~/.deepagents/config.toml\n.*?)```", text, re.S)
    assert m, "the README has no dcode config.toml snippet"
    if tomllib is None:
        pytest.skip("tomllib needs Python 3.11")
    return tomllib.loads(m.group(1))["sandboxes"]["providers"]["tether"]


def registry_provider(table: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """dcode's registry: a config table must carry class_path, whose class is
    instantiated with no arguments; its params go to get_or_create."""
    if "class_path" not in table:
        raise ValueError("config is missing 'class_path'")
    module, _, name = table["class_path"].partition(":")
    cls = getattr(importlib.import_module(module), name)
    return cls(), dict(table.get("params") or {})


class DcodeSandbox:
    """dcode's ``create_sandbox`` context manager, entered and exited the way
    ``_make_graph`` and its atexit hook do."""

    def __init__(self, provider: Any, params: dict[str, Any], sandbox_id: Optional[str] = None,
                 setup_script: Optional[str] = None) -> None:
        self.provider, self.params, self.sandbox_id, self.setup_script = provider, params, sandbox_id, setup_script
        self.printed: list[str] = []
        self.backend: Any = None

    def enter(self) -> Any:
        backend = self.provider.get_or_create(sandbox_id=self.sandbox_id, **self.params)
        self.printed.append(f"Tether sandbox ready: {backend.id}")
        if self.setup_script:
            result = backend.execute(f"bash -c {shlex.quote(self.setup_script)}")
            if result.exit_code != 0:
                raise RuntimeError("Setup failed - aborting")
        self.backend = backend
        return backend

    def exit(self) -> None:
        if self.sandbox_id is None and self.backend is not None:
            self.provider.delete(sandbox_id=self.backend.id)


async def agent_tools(backend: Any) -> dict[str, Any]:
    """What the agent's tools do first: async tools on the loop, sync ones in
    worker threads (BaseSandbox builds ls/read/write/edit/grep/glob on these)."""
    probe = await backend.aexecute(PROBE)
    ls = await backend.aexecute("ls -a /workspace")
    up = await backend.aupload_files([("/workspace/notes.md", b"# notes\n")])
    down = await backend.adownload_files(["/workspace/notes.md", "/workspace/missing.md"])
    grep = await backend.aexecute("grep -rl notes /workspace")
    sync_exec = await asyncio.to_thread(backend.execute, "cat /workspace/notes.md")
    sync_up = await asyncio.to_thread(backend.upload_files, [("/workspace/sync.txt", b"sync")])
    return {"probe": probe, "ls": ls, "up": up, "down": down, "grep": grep, "sync_exec": sync_exec, "sync_up": sync_up}


def check_tools(got: dict[str, Any]) -> None:
    assert (got["probe"].output, got["probe"].exit_code) == ("OPEN_SANDBOX_ALIVE\n", 0)
    assert got["ls"].exit_code == 0
    assert [u.error for u in got["up"]] == [None]
    assert [(d.content, d.error) for d in got["down"]] == [(b"# notes\n", None), (None, "file_not_found")]
    assert got["grep"].output == "/workspace/notes.md\n"
    assert got["sync_exec"].output == "# notes\n"
    assert [u.error for u in got["sync_up"]] == [None]


def provider_env(monkeypatch: pytest.MonkeyPatch, owner_ttl: int = 5) -> None:
    monkeypatch.setenv("TETHER_URL", URL)
    monkeypatch.setenv("TETHER_API_KEY", KEY)
    monkeypatch.setenv("TETHER_PROVIDER", "local")
    monkeypatch.setenv("TETHER_OWNER_TTL", str(owner_ttl))


def assert_ended(client: Tether, sandbox_id: str) -> None:
    """Terminated, released, and the probe refused with the state."""
    sb = client.wait_sandbox(sandbox_id, until="released", timeout=30)
    assert (sb.state, sb.released) == ("terminated", True), sb
    with pytest.raises(TetherError) as ctx:
        client.exec(sandbox_id, PROBE)
    assert (ctx.value.code, ctx.value.status, ctx.value.state) == ("SANDBOX_STATE_CONFLICT", 409, "terminated")


# -- startup, both shapes -------------------------------------------------------


@pytest.mark.parametrize("shape", ["sync get_or_create on the loop", "get_or_create in asyncio.to_thread"])
def test_dcode_starts_with_tether(shape: str, client: Tether, monkeypatch: pytest.MonkeyPatch):
    """dcode's startup and first tools on a guarded loop: no blocking call,
    the probe prints; after dcode's delete (outside the loop, as atexit
    runs it) the sandbox is terminated and released and the probe is 409."""
    provider_env(monkeypatch)
    table = readme_config()
    # The README's table as it is, but for its setup script (it makes a
    # virtual environment, whose files the grep below would find) and the
    # run's labels.
    assert table["params"]["setup"]
    table["params"] = {**table["params"], "setup": "mkdir -p /workspace/.venv", "labels": LABELS}

    async def make_graph() -> tuple[list[str], DcodeSandbox, bool, dict[str, Any]]:
        with blocking_guard.guarded() as violations:
            provider, params = registry_provider(table)
            factory = DcodeSandbox(provider, params)
            # The create waits for this gate: get_or_create on the loop must
            # return (with the final id) before the create has even begun.
            gate = threading.Event()
            create = provider._create
            provider._create = lambda *a, **kw: (gate.wait(30), create(*a, **kw))[1]
            if shape.startswith("sync"):
                backend = factory.enter()
                returned_first = backend.creating and not gate.is_set()
                gate.set()
            else:
                gate.set()
                backend = await asyncio.to_thread(factory.enter)
                returned_first = not backend.creating  # in a thread: ready when it returns
            got = await agent_tools(backend)
        return violations, factory, returned_first, got

    violations, factory, returned_first, got = asyncio.run(make_graph())
    assert violations == []
    backend = factory.backend
    assert factory.printed == [f"Tether sandbox ready: {backend.id}"] and backend.id.startswith("sbx_")
    assert returned_first, "get_or_create on the loop waited for the create" if shape.startswith("sync") else "not ready"
    check_tools(got)
    info = client.get_sandbox(backend.id)
    assert (info.state, info.owner, info.labels.get("tether-sandbox-test")) == ("ready", factory.provider.owner, LABELS["tether-sandbox-test"])
    factory.exit()  # atexit: no loop runs any more
    assert_ended(client, backend.id)
    factory.provider.close()


def test_setup_script_on_the_loop_fails_at_once_and_names_the_way_out(client: Tether, monkeypatch: pytest.MonkeyPatch):
    """--sandbox-setup on the loop cannot help blocking: execute refuses at
    once (no request sent) with an error naming Tether's `setup` parameter;
    the same script as that parameter runs before the sandbox is ready."""
    provider_env(monkeypatch)

    async def make_graph() -> tuple[list[str], Any, float]:
        with blocking_guard.guarded() as violations:
            provider = TetherProvider(labels=LABELS)
            factory = DcodeSandbox(provider, {}, setup_script="echo set-up > /workspace/setup.txt")
            with pytest.raises(TetherLoopBlockedError) as ctx:
                factory.enter()
        return violations, (provider, ctx.value), None

    violations, (provider, err), took = asyncio.run(make_graph())
    assert violations == []
    assert "`setup`" in str(err) and "aexecute" in str(err) and "[sandboxes.providers.tether.params]" in str(err)
    provider.close()  # ends the sandbox the startup had begun

    async def with_setup_param() -> str:
        with blocking_guard.guarded() as violations:
            provider = TetherProvider(labels=LABELS)
            backend = DcodeSandbox(provider, {"setup": "echo set-up > /workspace/setup.txt"}).enter()
            out = (await backend.aexecute("cat /workspace/setup.txt")).output
            await provider.adelete(sandbox_id=backend.id)
            await provider.aclose()
        assert violations == []
        return out

    assert asyncio.run(with_setup_param()) == "set-up\n"


def test_a_failed_background_creation_is_a_clear_error(client: Tether, monkeypatch: pytest.MonkeyPatch):
    """A create that fails after get_or_create returned surfaces on the first
    tool call (and in the sandbox's history), naming the sandbox, its state
    and the code; file calls report it per file; nothing stays alive."""
    provider_env(monkeypatch)

    async def make_graph() -> tuple[list[str], Any, Any, Any]:
        with blocking_guard.guarded() as violations:
            provider = TetherProvider(labels=LABELS)
            backend = provider.get_or_create(setup="echo no-such-toolchain >&2; exit 3")
            with pytest.raises(TetherError) as ctx:
                await backend.aexecute(PROBE)
            files = await backend.aupload_files([("/workspace/a.txt", b"a")])
        await provider.aclose()
        return violations, backend, ctx.value, files

    violations, backend, err, files = asyncio.run(make_graph())
    assert violations == []
    assert (err.code, err.state) == ("SANDBOX_STATE_CONFLICT", "failed") and backend.id in str(err), err
    assert "create_failed" in str(err)
    assert files[0].error and backend.id in files[0].error
    sb = client.wait_sandbox(backend.id, until="released", timeout=30)
    assert (sb.state, sb.reason, sb.released) == ("failed", "create_failed", True)
    events = client.sandbox_events(backend.id).items
    assert any(ev.to_state == "failed" and "exited with status 3" in ev.message for ev in events), events


def test_refused_background_create_and_unknown_attach(client: Tether, monkeypatch: pytest.MonkeyPatch):
    """A create the server refuses (an unknown provider) and an attach to an
    unknown id, both handed off on the loop: the first tool call raises an
    error naming the sandbox; dcode's delete at exit is a no-op."""
    provider_env(monkeypatch)

    async def make_graph() -> tuple[list[str], Any, Any, Any]:
        with blocking_guard.guarded() as violations:
            provider = TetherProvider(labels=LABELS)
            refused = provider.get_or_create(provider="no-such-provider")
            with pytest.raises(TetherError) as create_err:
                await refused.aexecute(PROBE)
            attached = provider.get_or_create(sandbox_id="sbx_00000000000000000000000000")
            with pytest.raises(TetherSandboxNotFoundError) as attach_err:
                await attached.aexecute(PROBE)
        return violations, (provider, refused), create_err.value, attach_err.value

    violations, (provider, refused), create_err, attach_err = asyncio.run(make_graph())
    assert violations == []
    assert create_err.code == "UNKNOWN_PROVIDER" and f"sandbox {refused.id} was not created" in str(create_err)
    assert (attach_err.code, attach_err.status) == ("NOT_FOUND", 404)
    provider.delete(sandbox_id=refused.id)  # dcode's atexit: nothing to do, no error
    provider.close()


def test_delete_while_the_background_create_runs(client: Tether, monkeypatch: pytest.MonkeyPatch):
    """dcode exits (or is interrupted) while the sandbox it asked for is
    still being created: its delete ends that sandbox (cancelled, released),
    whether or not the create has reached the server yet."""
    provider_env(monkeypatch)
    for started in (False, True):
        provider = TetherProvider(labels=LABELS)
        gate = threading.Event()
        create = provider._create
        provider._create = lambda *a, _c=create, _g=gate, **kw: (_g.wait(30), _c(*a, **kw))[1]

        async def make_graph(p: TetherProvider = provider) -> Any:
            with blocking_guard.guarded() as violations:
                backend = p.get_or_create(setup="sleep 2")
            assert violations == []
            return backend

        backend = asyncio.run(make_graph())
        if started:
            gate.set()  # the create goes out; the delete may land before or after it
        provider.delete(sandbox_id=backend.id)
        gate.set()
        sb = client.wait_sandbox(backend.id, until="released", timeout=30)
        assert (sb.state, sb.released) == ("cancelled", True), sb
        with pytest.raises(TetherError):
            asyncio.run(backend.aexecute(PROBE))
        provider.close()


def test_an_async_sandbox_outlives_the_loop_that_made_it(client: Tether, monkeypatch: pytest.MonkeyPatch):
    """The owner lease is heartbeated by a thread of the provider's, not by a
    task of the loop that made the sandbox: after that loop ends the sandbox
    stays ready past its lease, and a later loop still uses it."""
    provider_env(monkeypatch, owner_ttl=3)
    provider = TetherProvider(labels=LABELS)
    try:
        backend = asyncio.run(provider.aget_or_create())
        time.sleep(3 + JANITOR_INTERVAL + 1.5)
        assert client.get_sandbox(backend.id).state == "ready"
        assert asyncio.run(backend.aexecute(PROBE)).output == "OPEN_SANDBOX_ALIVE\n"
    finally:
        provider.close()


# -- a dcode process that dies -------------------------------------------------

DYING = textwrap.dedent(
    """
    import asyncio, atexit, sys
    from tether_sandbox import TetherProvider

    marker, labels = sys.argv[1], {"tether-sandbox-test": sys.argv[2]}
    atexit.register(lambda: print("ATEXIT RAN", flush=True))

    async def make_graph():   # dcode 0.1.59-0.1.65: the sync call, on the loop
        provider = TetherProvider(provider="local", owner_ttl=3, labels=labels)
        backend = provider.get_or_create()
        await backend.aexecute(marker + " >/dev/null 2>&1 &")
        print(backend.id, flush=True)
        await asyncio.sleep(3600)

    asyncio.run(make_graph())
    """
)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_dcode_that_dies_leaves_no_sandbox(sig: signal.Signals, client: Tether):
    """A dcode started the sync way on its loop, killed (SIGTERM: no atexit
    runs): its sandbox ends owner_expired within the lease plus one janitor
    interval, and its processes leave the host. Prints the overshoot."""
    ttl, marker = 3, new_marker()
    child = subprocess.Popen([sys.executable, "-c", DYING, marker, LABELS["tether-sandbox-test"]], env=child_env(),
                             text=True, stdout=subprocess.PIPE)
    try:
        sandbox_id = child.stdout.readline().strip()
        assert sandbox_id.startswith("sbx_"), sandbox_id
        assert running(marker)
        time.sleep(ttl + JANITOR_INTERVAL + 0.5)  # heartbeats keep it past the lease
        assert client.get_sandbox(sandbox_id).state == "ready"
        child.send_signal(sig)
        killed = time.time()
        child.wait(timeout=10)
        assert child.returncode == -sig and "ATEXIT RAN" not in child.stdout.read()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
    sb, _ = wait_for(lambda: client.get_sandbox(sandbox_id), lambda s: s.terminal, ttl + JANITOR_INTERVAL + 10, "ended")
    assert (sb.state, sb.reason) == ("terminated", "owner_expired")
    after = sb.ended_at.astimezone(timezone.utc).timestamp() - killed
    # The last heartbeat was at most ttl/3 before the kill, so the lease
    # lapsed by killed + ttl: the overshoot past that is the janitor's part.
    print(f"\n{sig.name}: ended {after:.2f}s after the kill; lease {ttl}s, janitor {JANITOR_INTERVAL:g}s, "
          f"overshoot past the latest lapse {after - ttl:+.2f}s")
    assert after <= ttl + JANITOR_INTERVAL + 1.5, f"the sandbox outlived its owner by {after:.1f}s"
    assert client.wait_sandbox(sandbox_id, until="released", timeout=30).released
    wait_gone(marker)


# -- --sandbox-id ------------------------------------------------------------------

ATTACH = textwrap.dedent(
    """
    import asyncio, sys
    from tether_sandbox import TetherProvider

    async def make_graph():   # dcode --sandbox-id X: attach, never delete
        provider = TetherProvider(provider="local", owner_ttl=3)
        backend = provider.get_or_create(sandbox_id=sys.argv[1])
        print(backend.id, (await backend.aexecute("printf 'OPEN_SANDBOX_ALIVE\\\\n'")).output.strip(), flush=True)

    asyncio.run(make_graph())
    """
)


def test_sandbox_id_attach_leaves_the_sandbox_to_its_owner(client: Tether):
    """`dcode --sandbox-id X` attaches to a sandbox someone else owns (or no
    one does), runs a tool, exits normally without deleting: 10 s later the
    sandbox is still ready, with its owner and deadline unchanged."""
    owner = f"someone-else-{LABELS['tether-sandbox-test']}"
    created = client.create_sandbox(provider="local", owner=owner, labels=LABELS)
    client.renew_owner_lease(owner, 60)
    owned = client.wait_sandbox(created.id)
    ownerless = client.wait_sandbox(client.create_sandbox(provider="local", ttl_seconds=600, labels=LABELS).id)
    stop = threading.Event()

    def heartbeat() -> None:  # the real owner stays alive
        while not stop.wait(2):
            client.renew_owner_lease(owner, 60)

    beat = threading.Thread(target=heartbeat)
    beat.start()
    try:
        for sb in (owned, ownerless):
            assert sb.ready, sb
            out = subprocess.run([sys.executable, "-c", ATTACH, sb.id], env=child_env(), text=True,
                                 capture_output=True, timeout=60)
            assert out.returncode == 0, out.stderr
            assert out.stdout.split() == [sb.id, "OPEN_SANDBOX_ALIVE"], out.stdout
        time.sleep(10)
        for sb in (owned, ownerless):
            now = client.get_sandbox(sb.id)
            assert (now.state, now.owner, now.expires_at) == ("ready", sb.owner, sb.expires_at), now
    finally:
        stop.set()
        beat.join()
        client.end_owner(owner)
        client.delete_sandbox(ownerless.id)


# -- untimed commands ----------------------------------------------------------------


def test_an_untimed_command_runs_past_a_minute(client: Tether, monkeypatch: pytest.MonkeyPatch):
    """dcode sends no timeout: a 65 s command completes through execute and
    aexecute alike (30 minutes by default, as every first-party backend)."""
    provider_env(monkeypatch, owner_ttl=10)
    provider = TetherProvider(labels=LABELS)
    backend = provider.get_or_create()

    async def both() -> tuple[Any, Any]:
        return await asyncio.gather(
            asyncio.to_thread(backend.execute, "sleep 65; echo sync-done"),
            backend.aexecute("sleep 65; echo async-done"),
        )

    try:
        sync_res, async_res = asyncio.run(both())
        assert (sync_res.exit_code, sync_res.output) == (0, "sync-done\n")
        assert (async_res.exit_code, async_res.output) == (0, "async-done\n")
    finally:
        provider.close()

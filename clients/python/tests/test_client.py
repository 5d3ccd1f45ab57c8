"""Tether and AsyncTether against a live server: the v1 API."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from conftest import KEY, LABELS, URL, live, wait_for
from tether_sandbox import AsyncTether, ExecExit, ExecOutput, Tether, TetherError

pytestmark = live


def test_sandboxes_owners_and_events(client: Tether):
    """The control plane on the sim provider: create, get, wait, list with
    filters and cursors, renew, events, owner lease and end."""
    owner = f"py-api-{uuid.uuid4().hex[:8]}"
    labels = {**LABELS, "case": "api"}
    first_event = client.events(limit=500)
    while first_event.next_cursor:
        first_event = client.events(cursor=first_event.next_cursor, limit=500)
    after = first_event.items[-1].id if first_event.items else 0

    made = [client.create_sandbox(provider="sim", owner=owner, labels=labels) for _ in range(3)]
    assert all(sb.state == "requested" and sb.owner == owner for sb in made)
    ready = [client.wait_sandbox(sb.id, timeout=30) for sb in made]
    assert [sb.state for sb in ready] == ["ready"] * 3
    assert client.get_sandbox(made[0].id, wait=5).state == "ready"

    page = client.list_sandboxes(owner=owner, labels=labels, limit=2)
    assert len(page.items) == 2 and page.next_cursor
    rest = client.list_sandboxes(owner=owner, labels=labels, limit=2, cursor=page.next_cursor)
    assert {sb.id for sb in page.items + rest.items} == {sb.id for sb in made}
    assert {sb.id for sb in client.iter_sandboxes(owner=owner, limit=1)} == {sb.id for sb in made}
    assert client.list_sandboxes(owner=owner, state="cancelled").items == []
    assert len(client.list_sandboxes(owner=owner, state=["ready", "creating"], provider="sim").items) == 3

    renewed = client.renew_sandbox(made[0].id, 120)
    assert renewed.id == made[0].id and renewed.capped in (True, False)

    lease = client.renew_owner_lease(owner, 60)
    assert lease.owner == owner and lease.expires_at is not None

    history = client.sandbox_events(made[0].id)
    assert [e.to_state for e in history.items][:1] == ["requested"] and history.items[-1].to_state == "ready"
    assert all(e.sandbox_id == made[0].id for e in client.iter_events(made[0].id))

    deleted = client.delete_sandbox(made[0].id)
    assert (deleted.state, deleted.reason) == ("terminated", "requested")
    assert client.delete_sandbox(made[0].id).state == "terminated"  # idempotent

    ended = client.end_owner(owner)
    assert ended.owner == owner and sorted(ended.sandbox_ids) == sorted(sb.id for sb in made[1:])
    for sb in made[1:]:
        got = client.wait_sandbox(sb.id, until="released", timeout=30)
        assert (got.state, got.reason, got.released) == ("terminated", "owner_released", True)

    feed = [e for e in client.iter_events(after=after) if e.sandbox_id in {sb.id for sb in made}]
    assert {e.to_state for e in feed} >= {"requested", "ready", "terminated"}

    names = {p.name: p for p in client.providers()}
    assert names["local"].capabilities.exec and names["local"].capabilities.files


def test_tether_error_carries_code_status_and_state(client: Tether):
    with pytest.raises(TetherError) as ctx:
        client.get_sandbox("sbx_00000000000000000000000000")
    assert (ctx.value.code, ctx.value.status, ctx.value.state) == ("NOT_FOUND", 404, None)

    sb = client.create_sandbox(provider="sim", labels=LABELS)
    client.delete_sandbox(sb.id)
    with pytest.raises(TetherError) as ctx:
        client.exec(sb.id, "printf 'OPEN_SANDBOX_ALIVE\\n'")
    err = ctx.value
    assert (err.code, err.status, err.state) in {
        ("SANDBOX_STATE_CONFLICT", 409, "cancelled"), ("SANDBOX_STATE_CONFLICT", 409, "terminated")}
    assert err.detail and err.request_id and err.problem["code"] == err.code
    assert "SANDBOX_STATE_CONFLICT" in str(err)

    with pytest.raises(TetherError) as ctx:
        client.create_sandbox(provider="no-such-provider")
    assert (ctx.value.code, ctx.value.status) == ("UNKNOWN_PROVIDER", 400)

    with pytest.raises(TetherError) as ctx, Tether(URL, "wrong-key") as bad:
        bad.providers()
    assert (ctx.value.code, ctx.value.status) == ("UNAUTHENTICATED", 401)

    with pytest.raises(TetherError) as ctx, Tether("http://127.0.0.1:9", KEY, connect_timeout=2) as nowhere:
        nowhere.providers()
    assert (ctx.value.code, ctx.value.status) == ("CONNECTION_FAILED", 0)


def test_streaming_exec_sync_and_async(client: Tether):
    sb = client.wait_sandbox(client.create_sandbox(provider="local", labels=LABELS).id, timeout=60)
    try:
        assert sb.state == "ready"
        events, stamps = [], []
        for ev in client.exec_stream(sb.id, "echo one; sleep 0.5; echo two >&2; exit 3"):
            events.append(ev)
            stamps.append(time.monotonic())
        chunks = [e for e in events if isinstance(e, ExecOutput)]
        assert [(c.stream, c.data) for c in chunks] == [("stdout", "one\n"), ("stderr", "two\n")]
        assert stamps[1] - stamps[0] >= 0.3, "the first chunk came only with the second: not streamed"
        assert isinstance(events[-1], ExecExit)
        assert (events[-1].result.exit_code, events[-1].result.output) == (3, "one\ntwo\n")

        async def run() -> list:
            async with AsyncTether(URL, KEY) as a:
                out = [ev async for ev in a.exec_stream(sb.id, "for i in 1 2 3; do echo $i; sleep 0.1; done", timeout=10)]
                # Cancelling a stream ends it at once.
                task = asyncio.ensure_future(a.exec_stream(sb.id, "sleep 30").__anext__())
                await asyncio.sleep(0.3)
                t0 = time.monotonic()
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                assert time.monotonic() - t0 < 0.5
                return out

        out = asyncio.run(run())
        assert "".join(e.data for e in out if isinstance(e, ExecOutput)) == "1\n2\n3\n"
        assert isinstance(out[-1], ExecExit) and out[-1].result.exit_code == 0
        assert out[-1].result.timeout_seconds == 10

        with pytest.raises(TetherError) as ctx:
            list(client.exec_stream(sb.id, ""))
        assert (ctx.value.code, ctx.value.status) == ("INVALID_REQUEST", 400)
    finally:
        client.delete_sandbox(sb.id)


def test_folders_as_tar_archives(client: Tether):
    import io
    import tarfile

    sb = client.wait_sandbox(client.create_sandbox(provider="local", labels=LABELS).id, timeout=60)
    try:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, data in (("a.txt", b"alpha"), ("sub/b.txt", b"beta")):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        client.write_archive(sb.id, "/workspace/proj", buf.getvalue())
        assert client.read_file(sb.id, "/workspace/proj/sub/b.txt") == b"beta"
        with tarfile.open(fileobj=io.BytesIO(client.read_archive(sb.id, "/workspace/proj"))) as tar:
            got = {m.name.lstrip("./"): tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
        assert got == {"a.txt": b"alpha", "sub/b.txt": b"beta"}
        with pytest.raises(TetherError) as ctx:
            client.read_archive(sb.id, "/workspace/none")
        assert ctx.value.code == "FILE_NOT_FOUND"
    finally:
        client.delete_sandbox(sb.id)


def test_pause_and_resume_sync_and_async(client: Tether):
    """A local sandbox paused with wait: a background counter stops, exec is
    409 SANDBOX_STATE_CONFLICT (state paused); resumed, the same counter goes
    on. Pause and resume are idempotent; AsyncTether does the same on sim."""
    sb = client.wait_sandbox(client.create_sandbox(provider="local", labels=LABELS).id, timeout=60)
    try:
        assert sb.state == "ready"
        client.exec(sb.id, "(echo $$ > /workspace/pid; i=0; while :; do i=$((i+1)); echo $i > /workspace/n.tmp; mv /workspace/n.tmp /workspace/n; sleep 0.05; done)"
                    " </dev/null >/dev/null 2>&1 &")

        def count() -> tuple[str, int]:
            out = client.exec(sb.id, "cat /workspace/pid; cat /workspace/n 2>/dev/null || echo 0").output.split()
            return out[0], int(out[1])

        wait_for(count, lambda c: c[1] > 2, 20, "the counter to count")
        pid, _ = count()
        paused = client.pause_sandbox(sb.id, wait=30)
        assert (paused.state, paused.paused, paused.settled) == ("paused", True, True)
        assert client.pause_sandbox(sb.id).state == "paused"  # idempotent
        with pytest.raises(TetherError) as ctx:
            client.exec(sb.id, "true")
        assert (ctx.value.code, ctx.value.status, ctx.value.state) == ("SANDBOX_STATE_CONFLICT", 409, "paused")

        resumed = client.resume_sandbox(sb.id, wait=30)
        assert (resumed.state, resumed.paused) == ("ready", False)
        assert client.resume_sandbox(sb.id).state == "ready"  # idempotent
        again, before = count()
        assert again == pid, "the counter after the resume is another process"
        wait_for(count, lambda c: c[1] > before + 2, 20, "the counter to count after the resume")
        history = [e.to_state for e in client.iter_events(sb.id)]
        assert history[-4:] == ["pausing", "paused", "resuming", "ready"]
    finally:
        client.delete_sandbox(sb.id)

    async def run() -> tuple[str, str, str]:
        async with AsyncTether(URL, KEY) as a:
            s = await a.wait_sandbox((await a.create_sandbox(provider="sim", labels=LABELS)).id, timeout=30)
            try:
                p = await a.pause_sandbox(s.id, wait=30)
                r = await a.resume_sandbox(s.id, wait=30)
                with pytest.raises(TetherError) as ctx:
                    await a.resume_sandbox("sbx_00000000000000000000000000")
                return p.state, r.state, ctx.value.code
            finally:
                await a.delete_sandbox(s.id)

    assert asyncio.run(run()) == ("paused", "ready", "NOT_FOUND")


def test_ports_and_previews_sync_and_async(client: Tether):
    import httpx

    from conftest import wait_for

    sb = client.wait_sandbox(client.create_sandbox(provider="local", labels=LABELS).id, timeout=60)
    try:
        res = client.exec(
            sb.id,
            "mkdir -p /workspace/www && printf hi > /workspace/www/index.html && cd /workspace/www && "
            "(python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &)",
        )
        assert res.exit_code == 0
        url = client.port_url(sb.id, 8000, "/index.html")
        assert url == f"{URL.rstrip('/')}/v1/sandboxes/{sb.id}/ports/8000/index.html"
        headers = {"Authorization": f"Bearer {KEY}"}
        got, _ = wait_for(lambda: httpx.get(url, headers=headers), lambda r: r.status_code == 200, 30, "served")
        assert got.text == "hi"
        assert httpx.get(client.port_url(sb.id, 8001)).status_code == 401  # the API key is needed
        assert httpx.get(client.port_url(sb.id, 8001), headers=headers).json()["code"] == "PORT_UNREACHABLE"
        with pytest.raises(ValueError):
            client.port_url(sb.id, 0)

        preview = client.create_preview(sb.id, 8000, ttl_seconds=600)
        assert preview.port == 8000 and preview.token and preview.url
        assert httpx.get(preview.url + "index.html").text == "hi"  # no API key

        async def run() -> None:
            async with AsyncTether(URL, KEY) as a:
                listed = await a.list_previews(sb.id)
                assert [p.id for p in listed] == [preview.id] and listed[0].token is None
                revoked = await a.revoke_preview(sb.id, preview.id)
                assert revoked.revoked_at is not None
                p2 = await a.create_preview(sb.id, 8000)
                assert httpx.get(p2.url + "index.html").text == "hi"

        asyncio.run(run())
        gone = httpx.get(preview.url)
        assert gone.status_code == 410 and gone.json()["code"] == "PREVIEW_GONE"
        assert any(p.capabilities.ports for p in client.providers() if p.name == "local")
    finally:
        client.delete_sandbox(sb.id)


def test_snapshots_sync_and_async(client: Tether):
    sb = client.wait_sandbox(
        client.create_sandbox(provider="local", labels=LABELS, params={"workspace_mb": 32}).id, timeout=60
    )
    restored = []
    try:
        client.write_file(sb.id, "/workspace/kept.txt", b"kept across sandboxes")
        snap = client.create_snapshot(sb.id, wait=30)
        assert (snap.state, snap.kind, snap.source_sandbox_id) == ("ready", "manual", sb.id)
        assert snap.size_bytes > 0
        assert [s.id for s in client.list_snapshots(sandbox_id=sb.id).items] == [snap.id]
        assert client.get_snapshot(snap.id).ready

        new = client.wait_sandbox(
            client.create_sandbox(provider="local", labels=LABELS, from_snapshot=snap.id).id, timeout=60
        )
        restored.append(new.id)
        assert new.from_snapshot == snap.id
        assert client.read_file(new.id, "/workspace/kept.txt") == b"kept across sandboxes"

        async def run() -> tuple:
            async with AsyncTether(URL, KEY) as a:
                s2 = await a.create_snapshot(new.id, wait=30)
                page = await a.list_snapshots(sandbox_id=new.id)
                got = await a.get_snapshot(s2.id)
                gone = await a.delete_snapshot(s2.id)
                return s2, page, got, gone

        s2, page, got, gone = asyncio.run(run())
        assert s2.state == "ready" and got.id == s2.id and [s.id for s in page.items] == [s2.id]
        assert gone.state == "deleted"

        # Bad input is the documented problem.
        with pytest.raises(TetherError) as ctx:
            client.create_sandbox(provider="local", labels=LABELS, from_snapshot=s2.id)
        assert (ctx.value.code, ctx.value.status) == ("SNAPSHOT_NOT_READY", 409)
        with pytest.raises(TetherError) as ctx:
            client.get_snapshot("snp_" + "0" * 26)
        assert (ctx.value.code, ctx.value.status) == ("NOT_FOUND", 404)
        assert client.delete_snapshot(snap.id).state == "deleted"
        assert client.delete_snapshot(snap.id).state == "deleted"  # idempotent
    finally:
        for sid in [sb.id, *restored]:
            client.delete_sandbox(sid)


def test_exit_snapshot_on_delete(client: Tether):
    sb = client.wait_sandbox(
        client.create_sandbox(provider="local", labels=LABELS, on_end="snapshot", params={"workspace_mb": 32}).id,
        timeout=60,
    )
    assert sb.on_end == "snapshot"
    client.write_file(sb.id, "/workspace/work.txt", b"unfinished")
    client.delete_sandbox(sb.id)
    client.wait_sandbox(sb.id, timeout=60, until="released")
    snaps = client.list_snapshots(sandbox_id=sb.id).items
    assert [(s.kind, s.state) for s in snaps] == [("exit", "ready")]
    new = client.wait_sandbox(
        client.create_sandbox(provider="local", labels=LABELS, from_snapshot=snaps[0].id).id, timeout=60
    )
    try:
        assert client.read_file(new.id, "/workspace/work.txt") == b"unfinished"
    finally:
        client.delete_sandbox(new.id)
        client.delete_snapshot(snaps[0].id)


def test_network_rules_policies_and_secrets_sync_and_async(client: Tether):
    """Secrets by name only, a named policy, and an allow-list sandbox's
    rules read and edited through both clients."""
    name = "py-" + uuid.uuid4().hex[:8]
    created = client.put_secret(name, "s3cret-python-value")
    assert created.name == name and "s3cret-python-value" not in repr(created.raw)
    assert name in [s.name for s in client.list_secrets()]
    with pytest.raises(TetherError) as err:
        client.put_secret(name, "two\nlines")
    assert err.value.code == "INVALID_REQUEST"

    policy = client.put_network_policy(name, ["pypi.org", "*.pythonhosted.org"])
    assert policy.allow == ["pypi.org", "*.pythonhosted.org"]
    assert client.get_network_policy(name).name == name
    sb = client.create_sandbox(provider="local", labels=LABELS, params={
        "network": "allowlist", "allow": ["example.com"], "policies": [name],
        "credentials": [{"host": "api.example.com", "header": "Authorization", "format": "Bearer {secret}", "secret": name}],
    })
    try:
        assert client.wait_sandbox(sb.id, timeout=60).state == "ready"
        net = client.get_network(sb.id)
        assert net.network == "allowlist" and net.allow == ["example.com"] and net.policies == [name]
        assert [c.secret for c in net.credentials] == [name] and not net.edited

        async def edit():
            async with AsyncTether(URL, KEY) as a:
                return await a.update_network(sb.id, ["example.com", "github.com:443"], policies=[])

        edited = asyncio.run(edit())
        assert edited.edited and edited.allow == ["example.com", "github.com:443"] and edited.policies == []
        assert [c.host for c in edited.credentials] == ["api.example.com"]  # kept: not given
        with pytest.raises(TetherError) as err:
            client.update_network(sb.id, ["not a host!"])
        assert err.value.code == "INVALID_REQUEST"
        assert client.get_network(sb.id).allow == ["example.com", "github.com:443"]
    finally:
        client.delete_sandbox(sb.id)
    client.delete_network_policy(name)
    client.delete_secret(name)
    assert name not in [s.name for s in client.list_secrets()]
    with pytest.raises(TetherError) as err:
        client.get_network_policy(name)
    assert err.value.code == "NOT_FOUND"

"""Tests that need no server: decoding, errors, configuration, packaging."""

from __future__ import annotations

import asyncio
import importlib
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest

import tether_sandbox
from tether_sandbox import (
    ExecExit,
    ExecOutput,
    ExecuteResponse,
    FileDownloadResponse,
    FileUploadResponse,
    Sandbox,
    TetherError,
    TetherProvider,
    TetherSandboxNotFoundError,
    default_owner_name,
)
from tether_sandbox._core import ExecStreamDecoder, create_sandbox, exec_command
from tether_sandbox._models import parse_time

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def feed(decoder: ExecStreamDecoder, text: str) -> list:
    out = []
    for line in text.split("\n"):
        out.extend(decoder.feed(line))
    return out


def test_sse_decoder_yields_chunks_then_exit():
    d = ExecStreamDecoder()
    events = feed(
        d,
        'event: stdout\ndata: {"data":"a\\n"}\n\n: a comment\n\n'
        'event: stderr\ndata: {"data":"b"}\n\n'
        'event: exit\ndata: {"exit_code":3,"truncated":false,"timed_out":false,"timeout_seconds":60}\n\n',
    )
    assert events[:2] == [ExecOutput("stdout", "a\n"), ExecOutput("stderr", "b")]
    assert isinstance(events[2], ExecExit)
    assert (events[2].result.output, events[2].result.exit_code, events[2].result.timeout_seconds) == ("a\nb", 3, 60)
    assert d.done
    d.finish()


def test_sse_decoder_raises_the_error_event_and_an_incomplete_stream():
    d = ExecStreamDecoder()
    with pytest.raises(TetherError) as ctx:
        feed(d, 'event: error\ndata: {"status":503,"code":"PROVIDER_UNAVAILABLE","detail":"gone"}\n\n')
    assert (ctx.value.code, ctx.value.status, ctx.value.detail) == ("PROVIDER_UNAVAILABLE", 503, "gone")
    d = ExecStreamDecoder()
    feed(d, 'event: stdout\ndata: {"data":"x"}\n\n')
    with pytest.raises(TetherError) as ctx:
        d.finish()
    assert ctx.value.code == "INCOMPLETE_STREAM"


def test_tether_error_from_a_problem_and_from_anything_else():
    e = TetherError.from_problem(
        409,
        b'{"status":409,"code":"SANDBOX_STATE_CONFLICT","detail":"sandbox x is terminated","state":"terminated","request_id":"r1"}',
    )
    assert (e.code, e.status, e.state, e.detail, e.request_id) == (
        "SANDBOX_STATE_CONFLICT", 409, "terminated", "sandbox x is terminated", "r1")
    assert str(e) == "409 SANDBOX_STATE_CONFLICT: sandbox x is terminated"
    e = TetherError.from_problem(502, b"<html>bad gateway</html>", "rid")
    assert (e.code, e.status, e.state, e.request_id) == ("HTTP_502", 502, None, "rid")
    assert "bad gateway" in e.detail


def test_times_as_go_writes_them():
    assert parse_time("2026-01-02T15:04:05.123456789Z") == datetime(2026, 1, 2, 15, 4, 5, 123456, tzinfo=timezone.utc)
    assert parse_time("2026-01-02T15:04:05Z") == datetime(2026, 1, 2, 15, 4, 5, tzinfo=timezone.utc)
    assert parse_time(None) is None
    sb = Sandbox.from_json({"id": "sbx_1", "state": "creating", "owner": None, "labels": None})
    assert (sb.pending, sb.settled, sb.terminal, sb.labels) == (True, False, False, {})


def test_pausing_and_resuming_are_not_settled():
    states = {s: Sandbox.from_json({"id": "sbx_1", "state": s}) for s in ("pausing", "paused", "resuming", "ready")}
    assert [(sb.settled, sb.paused, sb.pending) for sb in states.values()] == [
        (False, False, False), (True, True, False), (False, False, False), (True, False, False)]


def test_exec_timeout_semantics_in_the_request():
    def body(**kw):
        return next(exec_command("sbx_1", "true", **kw)).json

    assert "timeout_seconds" not in body()  # None: the server's default
    assert body(timeout=0)["timeout_seconds"] == 0  # 0: the server's maximum
    assert body(timeout=5)["timeout_seconds"] == 5
    with pytest.raises(ValueError):
        body(timeout=-1)


def test_create_request_leaves_out_what_is_not_given():
    call = next(create_sandbox(provider="local", owner="o", idempotency_key="k"))
    assert (call.method, call.path, call.json, call.headers) == (
        "POST", "/v1/sandboxes", {"provider": "local", "owner": "o"}, {"Idempotency-Key": "k"})


def test_zero_argument_construction_names_the_missing_variable(monkeypatch):
    monkeypatch.delenv("TETHER_URL", raising=False)
    monkeypatch.setenv("TETHER_API_KEY", "k")
    with pytest.raises(ValueError, match="TETHER_URL"):
        TetherProvider()
    monkeypatch.setenv("TETHER_URL", "http://127.0.0.1:9")
    monkeypatch.delenv("TETHER_API_KEY", raising=False)
    with pytest.raises(ValueError, match="TETHER_API_KEY"):
        TetherProvider()
    monkeypatch.setenv("TETHER_API_KEY", "k")
    monkeypatch.setenv("TETHER_OWNER_TTL", "7")
    p = TetherProvider()  # no network: construction only reads the environment
    try:
        assert (p.base_url, p.owner_ttl, p.provider) == ("http://127.0.0.1:9", 7, None)
        meta = p.metadata
        assert (meta.name, meta.working_dir, meta.supports_sandbox_id, meta.supports_snapshot_name) == (
            "tether", "/workspace", True, False)
        with pytest.raises(TypeError, match="snapshot"):
            p.get_or_create(snapshot="x")
    finally:
        p.close()


def test_owner_names_are_valid_and_unique():
    names = {default_owner_name() for _ in range(50)}
    assert len(names) == 50
    for name in names:
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}", name), name
        assert f"-{__import__('os').getpid()}-" in name


def test_deepagents_shapes():
    """Without deepagents installed (as on the test machine) the stand-ins
    have deepagents' names and fields."""
    assert ExecuteResponse("o", 0, False) == ExecuteResponse(output="o", exit_code=0, truncated=False)
    assert FileUploadResponse("/p").error is None
    assert FileDownloadResponse("/p", None, "file_not_found").error == "file_not_found"
    assert issubclass(TetherSandboxNotFoundError, TetherError)
    from tether_sandbox._compat import SandboxNotFoundError, SandboxProvider

    assert issubclass(TetherSandboxNotFoundError, SandboxNotFoundError)
    assert issubclass(TetherProvider, SandboxProvider)
    if not tether_sandbox.HAVE_DEEPAGENTS:
        from tether_sandbox import TetherSandbox
        from tether_sandbox._compat import BaseSandbox

        assert issubclass(TetherSandbox, BaseSandbox)


def test_stand_ins_say_what_they_are():
    """The stand-ins type `error` as deepagents' protocol does
    (FileOperationError | str | None) and claim no method they lack."""
    if tether_sandbox.HAVE_DEEPAGENTS:
        pytest.skip("deepagents is installed: its own classes are used")
    import typing

    from tether_sandbox._compat import BaseSandbox, FileOperationError

    for cls in (FileUploadResponse, FileDownloadResponse):
        hint = typing.get_type_hints(cls)["error"]
        assert set(typing.get_args(hint)) == {FileOperationError, str, type(None)}, hint
    assert typing.get_args(FileOperationError) == ("file_not_found", "permission_denied", "is_directory", "invalid_path")
    doc = BaseSandbox.__doc__ or ""
    for tool in ("ls", "read", "write", "edit", "grep", "glob"):
        assert not hasattr(BaseSandbox, tool) and tool in doc  # named as missing, and missing
    assert FileUploadResponse("/p", "409 SANDBOX_STATE_CONFLICT: ended").error.startswith("409")


def test_version_is_pyproject_version():
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert f'version = "{tether_sandbox.__version__}"' in pyproject


def test_sandbox_ids_have_the_servers_shape():
    import time

    ids = {tether_sandbox.new_sandbox_id() for _ in range(1000)}
    assert len(ids) == 1000
    alphabet = set("0123456789abcdefghjkmnpqrstvwxyz")
    for sid in ids:
        assert sid.startswith("sbx_") and len(sid) == 30 and set(sid[4:]) <= alphabet, sid
    # The first 10 characters are the time in milliseconds (48 bits, then 2
    # bits of the random part).
    sid = tether_sandbox.new_sandbox_id()
    n = 0
    for ch in sid[4:]:
        n = n * 32 + "0123456789abcdefghjkmnpqrstvwxyz".index(ch)
    ms = (n >> 2) >> 80
    assert abs(ms - time.time() * 1000) < 5000


def test_sync_calls_on_a_loop_refuse_without_sending(monkeypatch):
    """On an event loop's thread the sync TetherSandbox methods raise at
    once, naming the way out, and send nothing (no server here)."""
    from tether_sandbox import Sandbox, TetherLoopBlockedError, TetherSandbox

    provider = TetherProvider("http://127.0.0.1:9", "k")  # nothing listens there
    sb = TetherSandbox(provider, Sandbox(id="sbx_06h36jjekjqcsqh321h8g1ce9g", state="ready"))

    async def on_loop() -> list[str]:
        errors = []
        for call in (lambda: sb.execute("true"), lambda: sb.upload_files([("/workspace/a", b"")]),
                     lambda: sb.download_files(["/workspace/a"]), sb.refresh):
            with pytest.raises(TetherLoopBlockedError) as ctx:
                call()
            errors.append(str(ctx.value))
        return errors

    errors = asyncio.run(on_loop())
    assert all("`setup`" in e and "running event loop" in e for e in errors), errors
    assert "aexecute" in errors[0] and "arefresh" in errors[3]
    assert provider._clients._sync is None  # no client was even made
    provider.close()


def test_provider_settings_from_the_environment(monkeypatch):
    monkeypatch.setenv("TETHER_EXEC_TIMEOUT", "90")
    monkeypatch.setenv("TETHER_ADOPT", "1")
    p = TetherProvider("http://127.0.0.1:9", "k")
    assert (p.exec_timeout, p.adopt) == (90, True)
    monkeypatch.setenv("TETHER_EXEC_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="TETHER_EXEC_TIMEOUT"):
        TetherProvider("http://127.0.0.1:9", "k")
    monkeypatch.delenv("TETHER_EXEC_TIMEOUT")
    monkeypatch.delenv("TETHER_ADOPT")
    p = TetherProvider("http://127.0.0.1:9", "k")
    assert (p.exec_timeout, p.adopt) == (tether_sandbox.DEFAULT_EXEC_TIMEOUT, False) == (1800, False)
    with pytest.raises(TypeError, match="adopt"):
        p.get_or_create(flavour="x")


def test_entry_point_names_the_provider_class():
    text = PYPROJECT.read_text()
    section = re.search(r'\[project\.entry-points\."deepagents_code\.sandbox_providers"\]\s*\n([^\[]*)', text)
    assert section, "no deepagents_code.sandbox_providers entry point"
    target = re.search(r'^tether\s*=\s*"([^"]+)"', section.group(1), re.M)
    assert target, "no entry point named tether"
    module, _, attr = target.group(1).partition(":")
    assert getattr(importlib.import_module(module), attr) is TetherProvider
    assert re.search(r'^dependencies\s*=\s*\["httpx[^"]*"\]', text, re.M), "httpx must be the only dependency"


def _mock(statuses: list[tuple[int, dict, dict]]):
    """A handler answering with statuses in turn; records the requests."""
    import httpx

    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        status, headers, body = statuses[min(len(seen), len(statuses)) - 1]
        return httpx.Response(status, headers=headers, json=body)

    return handler, seen


PROVIDERS = {"items": [{"name": "local", "default": True, "available": True, "capabilities": {"exec": True, "files": True}}]}
RATE = (429, {"Retry-After": "0"}, {"status": 429, "code": "QUOTA_EXCEEDED", "detail": "over its rate"})


def test_rate_limits_and_an_unreachable_database_are_retried():
    import asyncio

    import httpx

    from tether_sandbox import AsyncTether, Tether

    down = (503, {"Retry-After": "0"}, {"status": 503, "code": "UNAVAILABLE", "detail": "postgres"})
    handler, seen = _mock([RATE, down, (200, {}, PROVIDERS)])
    with Tether("http://t", "k", http_client=httpx.Client(base_url="http://t", transport=httpx.MockTransport(handler))) as t:
        assert [p.name for p in t.providers()] == ["local"]
    assert len(seen) == 3 and seen[0].headers["authorization"] == "Bearer k"

    handler, seen = _mock([RATE, (200, {}, PROVIDERS)])

    async def run():
        transport = httpx.MockTransport(handler)
        async with AsyncTether("http://t", "k", http_client=httpx.AsyncClient(base_url="http://t", transport=transport)) as a:
            return await a.providers()

    assert [p.name for p in asyncio.run(run())] == ["local"] and len(seen) == 2


def test_other_errors_and_long_waits_are_not_retried():
    import httpx

    from tether_sandbox import Tether

    for answer in [
        (503, {}, {"status": 503, "code": "PROVIDER_UNAVAILABLE", "detail": "no bwrap"}),
        (429, {"Retry-After": "60"}, {"status": 429, "code": "QUOTA_EXCEEDED", "detail": "too many sandboxes"}),
        (404, {}, {"status": 404, "code": "NOT_FOUND", "detail": "no"}),
    ]:
        handler, seen = _mock([answer, (200, {}, PROVIDERS)])
        with Tether("http://t", "k", http_client=httpx.Client(base_url="http://t", transport=httpx.MockTransport(handler))) as t:
            with pytest.raises(TetherError) as ctx:
                t.providers()
        assert (ctx.value.code, len(seen)) == (answer[2]["code"], 1)
    handler, seen = _mock([RATE])
    with Tether("http://t", "k", retries=2, http_client=httpx.Client(base_url="http://t", transport=httpx.MockTransport(handler))) as t:
        with pytest.raises(TetherError) as ctx:
            t.providers()
    assert (ctx.value.code, ctx.value.retry_after, len(seen)) == ("QUOTA_EXCEEDED", 0.0, 3)


# -- webhook signatures ----------------------------------------------------

# A delivery signed by Tether's own Go code (internal/webhook.Sign) with this
# secret at t=1800000000, so that the two implementations are held to one
# another.
GO_SECRET = "whsec_test"
GO_BODY = b'{"id":"whd_x","events":[]}'


def _sign(secret: str, t: int, body: bytes) -> str:
    import hashlib
    import hmac

    return f"t={t},v1=" + hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()


def test_verify_signature_accepts_the_exact_body_only():
    from tether_sandbox import verify_signature

    now = 1_800_000_000
    header = _sign("whsec_abc", now, b'{"id":"whd_1"}')
    assert verify_signature(b'{"id":"whd_1"}', header, "whsec_abc", now=now + 60)
    assert verify_signature('{"id":"whd_1"}', header, "whsec_abc", now=now)  # str bodies too
    assert verify_signature(b'{"id":"whd_1"}', "v1=00, " + header, "whsec_abc", now=now)
    assert not verify_signature(b'{"id":"whd_2"}', header, "whsec_abc", now=now)  # tampered
    assert not verify_signature(b'{"id":"whd_1"}', header, "whsec_other", now=now)
    assert not verify_signature(b'{"id":"whd_1"}', header, "whsec_abc", now=now + 3600)  # stale
    assert verify_signature(b'{"id":"whd_1"}', header, "whsec_abc", now=now + 3600, tolerance=0)
    for bad in ["", None, "nonsense", "t=abc,v1=00", header.split(",")[1], header.split(",")[0]]:
        assert not verify_signature(b'{"id":"whd_1"}', bad, "whsec_abc", now=now)


def test_verify_signature_matches_tethers_signer():
    from tether_sandbox import verify_signature

    # webhook.Sign("whsec_test", time.Unix(1800000000, 0), GO_BODY), by the Go server's code.
    header = "t=1800000000,v1=1ddf74de49ae4014713298d81fc685db63210ce09830b61189acb7fc08e52f30"
    assert verify_signature(GO_BODY, header, GO_SECRET, now=1_800_000_000)
    assert not verify_signature(GO_BODY + b" ", header, GO_SECRET, now=1_800_000_000)


def test_relative_paths_resolve_as_a_shell_in_the_working_directory_would():
    from tether_sandbox import resolve_sandbox_path

    cases = [
        ("a/b", "/workspace/a/b"),
        ("./x", "/workspace/x"),
        ("x/./y//z", "/workspace/x/y/z"),
        ("../x", "/x"),
        ("../../../../etc/passwd", "/etc/passwd"),
        ("../../x", "/x"),
        (".", "/workspace"),
        ("dir/", "/workspace/dir/"),
        ("a/../b", "/workspace/b"),
        ("/etc/hosts", "/etc/hosts"),
        ("/workspace/../etc", "/workspace/../etc"),  # absolute: Tether judges it as sent
        ("", ""),
    ]
    for path, want in cases:
        assert resolve_sandbox_path("/workspace", path) == want, path
    assert resolve_sandbox_path("/", "../x") == "/x"
    p = TetherProvider("http://127.0.0.1:9", "k")
    try:
        sb = tether_sandbox.TetherSandbox(p, Sandbox(id="sbx_x", state="ready", work_dir="/home/app"))
        assert sb.resolve_path("src/a.py") == "/home/app/src/a.py"
    finally:
        p.close()


def test_failures_are_dcode_sandbox_errors():
    """Every failure is a dcode SandboxError (here the stand-in), the
    transport's exception its original_exc; a closed provider's is
    NOT_INITIALIZED, raised without a request."""
    from tether_sandbox import TetherClosedError, TetherSandbox
    from tether_sandbox._compat import SandboxError, SandboxNotFoundError

    assert issubclass(TetherError, SandboxError)
    assert issubclass(TetherSandboxNotFoundError, SandboxNotFoundError)
    assert issubclass(TetherClosedError, TetherError) and issubclass(TetherClosedError, RuntimeError)
    p = TetherProvider("http://127.0.0.1:9", "k")  # nothing listens there
    sb = TetherSandbox(p, Sandbox(id="sbx_x", state="ready"))
    with pytest.raises(SandboxError) as err:
        sb.execute("true")
    assert isinstance(err.value, TetherError)
    assert (err.value.code, err.value.status) == ("CONNECTION_FAILED", 0)
    assert err.value.original_exc is not None and err.value.original_exc is err.value.__cause__
    with pytest.raises(SandboxError):
        asyncio.run(sb.aexecute("true"))
    p.close()
    with pytest.raises(TetherClosedError) as closed:
        sb.execute("true")
    assert (closed.value.code, str(closed.value)) == ("NOT_INITIALIZED", "NOT_INITIALIZED: sandbox sbx_x's TetherProvider is closed")


# A stand-in of dcode's deepagents_code/integrations/sandbox_provider.py
# (langchain-ai/deepagents, libs/code): its SandboxError (with original_exc),
# SandboxNotFoundError and SandboxProvider, as that file defines them.
DCODE_STAND_IN = '''
import asyncio
from abc import ABC, abstractmethod


class SandboxError(Exception):
    @property
    def original_exc(self):
        return self.__cause__


class SandboxNotFoundError(SandboxError):
    pass


class SandboxProvider(ABC):
    @property
    def metadata(self):
        return None

    @abstractmethod
    def get_or_create(self, *, sandbox_id=None, **kwargs):
        raise NotImplementedError

    @abstractmethod
    def delete(self, *, sandbox_id, **kwargs):
        raise NotImplementedError

    async def aget_or_create(self, *, sandbox_id=None, **kwargs):
        return await asyncio.to_thread(self.get_or_create, sandbox_id=sandbox_id, **kwargs)

    async def adelete(self, *, sandbox_id, **kwargs):
        await asyncio.to_thread(self.delete, sandbox_id=sandbox_id, **kwargs)
'''

DCODE_CHECK = '''
from deepagents_code.integrations import sandbox_provider as dcode
import tether_sandbox
from tether_sandbox import Sandbox, TetherClosedError, TetherError, TetherProvider, TetherSandbox, TetherSandboxNotFoundError

assert tether_sandbox.HAVE_DEEPAGENTS_CODE
assert issubclass(TetherError, dcode.SandboxError) and issubclass(TetherClosedError, dcode.SandboxError)
assert issubclass(TetherSandboxNotFoundError, dcode.SandboxNotFoundError)
assert issubclass(TetherProvider, dcode.SandboxProvider)
p = TetherProvider("http://127.0.0.1:9", "k")
sb = TetherSandbox(p, Sandbox(id="sbx_x", state="ready"))
try:
    sb.execute("true")
except dcode.SandboxError as err:  # as code written for dcode's providers catches it
    assert err.code == "CONNECTION_FAILED" and err.original_exc is not None
else:
    raise AssertionError("no error")
p.close()
try:
    sb.execute("true")
except dcode.SandboxError as err:
    assert err.code == "NOT_INITIALIZED"
print("dcode errors ok")
'''


def test_with_dcode_installed_failures_are_its_sandbox_errors(tmp_path: Path):
    import subprocess
    import sys

    pkg = tmp_path / "deepagents_code" / "integrations"
    pkg.mkdir(parents=True)
    (tmp_path / "deepagents_code" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "sandbox_provider.py").write_text(DCODE_STAND_IN)
    env = {"PYTHONPATH": f"{tmp_path}:{Path(tether_sandbox.__file__).resolve().parents[1]}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", DCODE_CHECK], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "dcode errors ok"


# -- processes, terminals and watches -------------------------------------


def test_start_process_request():
    from tether_sandbox._core import start_process

    def call(*args, **kw):
        return next(start_process("sbx_1", *args, **kw))

    c = call("python3 -m http.server", env={"A": "1"}, cwd="/workspace", tag="dev", stdin=True, timeout=0)
    assert (c.method, c.path, c.json) == ("POST", "/v1/sandboxes/sbx_1/processes", {
        "command": "python3 -m http.server", "env": {"A": "1"}, "cwd": "/workspace", "tag": "dev",
        "stdin": True, "timeout_seconds": 0})
    assert call(argv=["sh"], pty=(24, 80)).json == {"argv": ["sh"], "pty": {"rows": 24, "cols": 80}}
    assert call(argv=("top",), pty={"rows": 30, "cols": 100}).json["pty"] == {"rows": 30, "cols": 100}
    for bad in [dict(), dict(command="a", argv=["a"]), dict(argv="sh -c x"), dict(command="a", pty=(0, 80)),
                dict(command="a", timeout=-1)]:
        with pytest.raises(ValueError):
            call(**bad)


def test_process_paths_take_a_pid_or_a_tag():
    from tether_sandbox._core import get_process, process_output_call, signal_process, write_stdin

    assert next(get_process("sbx_1", 42, wait=30)).path == "/v1/sandboxes/sbx_1/processes/42"
    assert next(get_process("sbx_1", 42, wait=30)).params == [("wait", "30.000s")]
    assert next(signal_process("sbx_1", "dev")).json == {"signal": "TERM"}
    assert next(signal_process("sbx_1", "dev", 9)).json == {"signal": "9"}
    w = next(write_stdin("sbx_1", "dev", "hi\n", close=True))
    assert (w.path, w.params, w.content) == ("/v1/sandboxes/sbx_1/processes/dev/stdin", [("close", "true")], b"hi\n")
    o = process_output_call("sbx_1", 7, from_start=True, binary=True)
    assert (o.method, o.path, o.params) == ("GET", "/v1/sandboxes/sbx_1/processes/7/output", [("from", "start"), ("encoding", "base64")])
    for bad in (0, -1, True, None, ""):
        with pytest.raises(ValueError):
            next(get_process("sbx_1", bad))


def test_output_decoder_yields_start_chunks_dropped_then_exit():
    from tether_sandbox import ProcessDropped, ProcessEnded, ProcessExit, ProcessOutput, ProcessStarted
    from tether_sandbox._core import ProcessOutputDecoder

    d = ProcessOutputDecoder()
    events = feed(d, 'event: start\ndata: {"pid":42}\n\n: keep-alive\n\n'
                     'event: stdout\ndata: {"data":"ready\\n","offset":0}\n\n'
                     'event: dropped\ndata: {"bytes":10,"offset":16}\n\n'
                     'event: pty\ndata: {"data":"","data_base64":"AP8=","offset":26}\n\n'
                     'event: exit\ndata: {"code":-1,"signal":15,"exited":false,"status":"signal: terminated"}\n\n')
    assert events[:3] == [ProcessStarted(42), ProcessOutput("stdout", "ready\n", 0), ProcessDropped(10, 16)]
    assert (events[3].stream, events[3].data, events[3].data_bytes) == ("pty", "", b"\x00\xff")
    assert events[4] == ProcessEnded(ProcessExit(-1, 15, False, "signal: terminated")) and d.done
    d = ProcessOutputDecoder()
    feed(d, 'event: start\ndata: {"pid":42}\n\n')
    with pytest.raises(TetherError) as ctx:
        d.finish()
    assert ctx.value.code == "INCOMPLETE_STREAM"


def test_watch_decoder_yields_start_then_changes_and_raises_the_end():
    from tether_sandbox import FileChange, WatchStarted
    from tether_sandbox._core import WatchDecoder

    d = WatchDecoder()
    events = feed(d, 'event: start\ndata: {"path":"/workspace","recursive":true}\n\n'
                     'event: create\ndata: {"kind":"create","path":"d/a.txt","is_dir":false,"at":"2026-01-02T15:04:05.5Z"}\n\n')
    assert events[0] == WatchStarted("/workspace", True)
    assert isinstance(events[1], FileChange) and (events[1].kind, events[1].path, events[1].is_dir) == ("create", "d/a.txt", False)
    assert events[1].at == datetime(2026, 1, 2, 15, 4, 5, 500000, tzinfo=timezone.utc)
    with pytest.raises(TetherError) as ctx:
        feed(d, 'event: error\ndata: {"status":409,"code":"SANDBOX_STATE_CONFLICT","detail":"ended","state":"terminated"}\n\n')
    assert (ctx.value.code, ctx.value.state) == ("SANDBOX_STATE_CONFLICT", "terminated")
    with pytest.raises(TetherError) as ctx:
        WatchDecoder().finish()
    assert ctx.value.code == "INCOMPLETE_STREAM"


def test_process_errors_are_their_codes_sync_and_async():
    """PROCESS_NOT_FOUND and PROCESS_STATE_CONFLICT, from a call and from a
    stream's refusal, are TetherErrors with their code; neither is retried."""
    import httpx

    from tether_sandbox import AsyncTether, Tether

    gone = (404, {}, {"status": 404, "code": "PROCESS_NOT_FOUND", "detail": "no process 7 in sandbox sbx_1"})
    ended = (409, {}, {"status": 409, "code": "PROCESS_STATE_CONFLICT", "detail": "process 7 has ended"})
    for answer, act in [
        (gone, lambda t: t.get_process("sbx_1", 7)),
        (gone, lambda t: list(t.process_output("sbx_1", 7, from_start=True))),
        (ended, lambda t: t.write_stdin("sbx_1", 7, "x")),
        (ended, lambda t: t.resize_process("sbx_1", 7, 30, 100)),
        (ended, lambda t: t.signal_process("sbx_1", "dev", "KILL")),
    ]:
        handler, seen = _mock([answer])
        with Tether("http://t", "k", http_client=httpx.Client(base_url="http://t", transport=httpx.MockTransport(handler))) as t:
            with pytest.raises(TetherError) as ctx:
                act(t)
        assert (ctx.value.code, ctx.value.status, len(seen)) == (answer[2]["code"], answer[0], 1)

    handler, seen = _mock([gone])

    async def run():
        async with AsyncTether("http://t", "k", http_client=httpx.AsyncClient(base_url="http://t", transport=httpx.MockTransport(handler))) as a:
            with pytest.raises(TetherError) as ctx:
                await a.wait_process("sbx_1", 7, timeout=1)
            with pytest.raises(TetherError) as ctx2:
                async for _ in a.process_output("sbx_1", 7):
                    pass
            return ctx.value.code, ctx2.value.code

    assert asyncio.run(run()) == ("PROCESS_NOT_FOUND", "PROCESS_NOT_FOUND")


def test_output_and_watch_streams_sync_and_async():
    import httpx

    from tether_sandbox import AsyncTether, ProcessEnded, ProcessOutput, Tether, WatchStarted

    output = (b'event: start\ndata: {"pid":7}\n\nevent: stderr\ndata: {"data":"x","offset":0}\n\n'
              b'event: exit\ndata: {"code":3,"signal":0,"exited":true,"status":"exit status 3"}\n\n')
    watch = b'event: start\ndata: {"path":"/workspace","recursive":false}\n\n'
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        body = output if request.url.path.endswith("/output") else watch
        return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, content=body)

    with Tether("http://t", "k", http_client=httpx.Client(base_url="http://t", transport=httpx.MockTransport(handler))) as t:
        events = list(t.process_output("sbx_1", 7, from_start=True))
        assert events[1:] == [ProcessOutput("stderr", "x", 0), ProcessEnded(events[2].exit)] and events[2].exit.code == 3
        w = t.watch("sbx_1", "/workspace")
        assert next(w) == WatchStarted("/workspace", False)
        with pytest.raises(TetherError) as ctx:  # the stream ended without an error event
            next(w)
        assert ctx.value.code == "INCOMPLETE_STREAM"
    assert seen[0].url.params["from"] == "start" and seen[1].url.params["path"] == "/workspace"

    async def run():
        async with AsyncTether("http://t", "k", http_client=httpx.AsyncClient(base_url="http://t", transport=httpx.MockTransport(handler))) as a:
            return [ev async for ev in a.process_output("sbx_1", 7)]

    assert [type(e).__name__ for e in asyncio.run(run())] == ["ProcessStarted", "ProcessOutput", "ProcessEnded"]

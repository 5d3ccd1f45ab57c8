"""Shared fixtures of the tether-sandbox tests.

The live tests need a running Tether with the local provider: TETHER_URL,
TETHER_API_KEY and TETHER_JANITOR_INTERVAL (seconds) are set by the Go e2e
test (test/e2e/python_test.go), which starts one. By hand:

    PYTHONPATH=clients/python TETHER_URL=http://127.0.0.1:8080 TETHER_API_KEY=... \\
        TETHER_JANITOR_INTERVAL=1 python3 -m pytest -q clients/python/tests

Every sandbox a test makes carries the label tether-sandbox-test=<run id>;
at the end of the session any of them still alive is deleted and reported
as a leak (sandboxes outlive processes by design).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tether_sandbox import Tether, TetherProvider  # noqa: E402

URL = os.environ.get("TETHER_URL", "")
KEY = os.environ.get("TETHER_API_KEY", "")
JANITOR_INTERVAL = float(os.environ.get("TETHER_JANITOR_INTERVAL", "5"))
PACKAGE_DIR = str(Path(__file__).resolve().parents[1])
RUN_ID = uuid.uuid4().hex[:12]
LABELS = {"tether-sandbox-test": RUN_ID}

live = pytest.mark.skipif(not (URL and KEY), reason="needs a live Tether: set TETHER_URL and TETHER_API_KEY")


def running(marker: str) -> bool:
    """Whether a host process's command line contains marker."""
    return subprocess.run(["pgrep", "-f", marker], stdout=subprocess.DEVNULL).returncode == 0


def wait_gone(marker: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while running(marker):
        if time.monotonic() > deadline:
            raise AssertionError(f"process {marker!r} still runs on the host")
        time.sleep(0.05)


def new_marker() -> str:
    """A sleep command line unique to the test (sleeps about 9 days)."""
    return f"sleep 9{uuid.uuid4().int % 10_000_000:07d}"


def wait_for(fn: Callable[[], Any], pred: Callable[[Any], bool], timeout: float, what: str) -> tuple[Any, float]:
    """Poll fn() until pred(result); returns (result, seconds taken)."""
    start = time.monotonic()
    while True:
        value = fn()
        if pred(value):
            return value, time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(f"never {what}; last: {value}")
        time.sleep(0.05)


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = PACKAGE_DIR + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


@pytest.fixture(scope="session")
def client() -> Iterator[Tether]:
    if not (URL and KEY):
        pytest.skip("needs a live Tether: set TETHER_URL and TETHER_API_KEY")
    with Tether(URL, KEY) as t:
        yield t


@pytest.fixture(scope="session", autouse=True)
def no_leaks() -> Iterator[None]:
    """After the session: no sandbox of this run may still be alive."""
    yield
    if not (URL and KEY):
        return
    with Tether(URL, KEY) as t:
        alive = list(t.iter_sandboxes(labels=LABELS, state=("requested", "creating", "ready")))
        for sb in alive:
            t.delete_sandbox(sb.id)
        for sb in t.iter_sandboxes(labels=LABELS, released=False):
            t.wait_sandbox(sb.id, until="released", timeout=30)
    if alive:
        raise AssertionError(f"tests left {len(alive)} sandboxes alive: {[(s.id, s.state, s.owner) for s in alive]}")


@pytest.fixture
def provider() -> Iterator[TetherProvider]:
    """A provider of local sandboxes, closed (its sandboxes ended) afterwards."""
    if not (URL and KEY):
        pytest.skip("needs a live Tether: set TETHER_URL and TETHER_API_KEY")
    p = TetherProvider(URL, KEY, provider="local", owner_ttl=10, labels=LABELS)
    yield p
    p.close()

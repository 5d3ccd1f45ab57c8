"""A dependency-free Python client for Tether, shaped for dcode (deepagents-code).

dcode plugs sandboxes in through a provider with ``get_or_create`` and
``delete``, and a backend with ``id``, ``execute``, ``upload_files`` and
``download_files``. This module implements that shape over Tether's REST API
with the standard library only.

The provider owns its sandboxes through an *owner lease*: a background thread
heartbeats the lease while the process lives, and ``close()`` ends the owner,
which ends its sandboxes. If the process dies without closing (a crash,
SIGKILL, OOM), the heartbeats stop and Tether ends the sandboxes when the
lease lapses: nothing relies on exit hooks.

    with TetherProvider("http://127.0.0.1:8080", api_key="...") as provider:
        sb = provider.get_or_create()
        print(sb.execute("printf 'OPEN_SANDBOX_ALIVE\\n'").output)
"""

from __future__ import annotations

import json
import os
import random
import socket
import string
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Iterable, Optional

__all__ = [
    "TetherError",
    "TetherProvider",
    "TetherSandbox",
    "ExecuteResponse",
    "FileUploadResponse",
    "FileDownloadResponse",
]


class TetherError(Exception):
    """An API error: the HTTP status and the problem document's code."""

    def __init__(self, status: int, code: str, detail: str, state: Optional[str] = None):
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        self.state = state


@dataclass
class ExecuteResponse:
    output: str
    exit_code: int
    truncated: bool = False
    timed_out: bool = False


@dataclass
class FileUploadResponse:
    path: str
    error: Optional[str] = None


@dataclass
class FileDownloadResponse:
    path: str
    content: Optional[bytes] = None
    error: Optional[str] = None


class _API:
    """Minimal JSON-over-HTTP with Tether's bearer auth and problem errors."""

    def __init__(self, base_url: str, api_key: str, timeout: float):
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    def request(self, method: str, path: str, body: Any = None, raw: Optional[bytes] = None,
                timeout: Optional[float] = None) -> tuple[int, Any]:
        data = raw
        headers = {"Authorization": f"Bearer {self.api_key}"}
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        elif raw is not None:
            headers["Content-Type"] = "application/octet-stream"
        req = urllib.request.Request(self.base_url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
                payload = resp.read()
                if resp.headers.get_content_type() == "application/json":
                    return resp.status, json.loads(payload or b"null")
                return resp.status, payload
        except urllib.error.HTTPError as err:
            payload = err.read()
            try:
                problem = json.loads(payload)
            except ValueError:
                problem = {}
            raise TetherError(err.code, problem.get("code", "HTTP_%d" % err.code),
                              problem.get("detail", payload.decode(errors="replace")),
                              problem.get("state")) from None


class TetherSandbox:
    """One Tether sandbox, as a dcode backend."""

    def __init__(self, api: _API, sandbox: dict):
        self._api = api
        self.id: str = sandbox["id"]
        self.info = sandbox

    def __repr__(self) -> str:
        return f"TetherSandbox({self.id!r}, state={self.info.get('state')!r})"

    def _path(self, suffix: str = "") -> str:
        return "/v1/sandboxes/" + urllib.parse.quote(self.id) + suffix

    def refresh(self, wait: Optional[float] = None) -> dict:
        """Re-read the sandbox; with wait, block until it settles (up to wait seconds)."""
        query = f"?wait={int(wait)}s" if wait else ""
        _, self.info = self._api.request("GET", self._path(query),
                                          timeout=(wait or 0) + self._api.timeout)
        return self.info

    def execute(self, command: str, timeout: Optional[int] = None) -> ExecuteResponse:
        """Run a shell command; returns its combined output and exit code."""
        body: dict = {"command": command}
        if timeout is not None:
            body["timeout_seconds"] = max(1, int(timeout))
        _, res = self._api.request("POST", self._path("/exec"), body,
                                   timeout=(timeout or 60) + self._api.timeout)
        return ExecuteResponse(res["output"], res["exit_code"], res.get("truncated", False),
                               res.get("timed_out", False))

    def upload_files(self, files: Iterable[tuple[str, bytes]]) -> list[FileUploadResponse]:
        """Write each (path, content); errors are reported per file."""
        out = []
        for path, content in files:
            try:
                self._api.request("PUT", self._path("/files?path=" + urllib.parse.quote(path)), raw=bytes(content))
                out.append(FileUploadResponse(path))
            except TetherError as err:
                out.append(FileUploadResponse(path, error=err.detail))
        return out

    def download_files(self, paths: Iterable[str]) -> list[FileDownloadResponse]:
        """Read each path; errors (such as a missing file) are reported per file."""
        out = []
        for path in paths:
            try:
                _, content = self._api.request("GET", self._path("/files?path=" + urllib.parse.quote(path)))
                out.append(FileDownloadResponse(path, content=content))
            except TetherError as err:
                out.append(FileDownloadResponse(path, error=err.detail))
        return out


def _default_owner() -> str:
    suffix = "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(6))
    host = "".join(c if c.isalnum() or c in "._-" else "-" for c in socket.gethostname())[:40] or "host"
    return f"py-{host}-{os.getpid()}-{suffix}"


class TetherProvider:
    """Creates and deletes Tether sandboxes owned by this process.

    base_url and api_key default to the TETHER_URL and TETHER_API_KEY
    environment variables. owner_ttl is the owner lease in seconds: after a
    crash, the sandboxes end within it (plus one janitor interval).
    """

    def __init__(self, base_url: Optional[str] = None, api_key: Optional[str] = None, *,
                 provider: str = "local", owner: Optional[str] = None, owner_ttl: int = 30,
                 ready_timeout: float = 300, request_timeout: float = 30):
        base_url = base_url or os.environ.get("TETHER_URL", "http://127.0.0.1:8080")
        api_key = api_key or os.environ.get("TETHER_API_KEY", "")
        if not api_key:
            raise ValueError("an API key is required (api_key= or TETHER_API_KEY)")
        self._api = _API(base_url, api_key, request_timeout)
        self.provider = provider
        self.owner = owner or _default_owner()
        self.owner_ttl = max(3, int(owner_ttl))
        self.ready_timeout = ready_timeout
        self._stop = threading.Event()
        self._heartbeat: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self._closed = False

    # -- the owner lease -------------------------------------------------

    def _start_heartbeat(self) -> None:
        with self._lock:
            if self._heartbeat is None:
                self._beat()  # the lease now has owner_ttl, not the server's default
                self._heartbeat = threading.Thread(target=self._heartbeat_loop, name="tether-heartbeat", daemon=True)
                self._heartbeat.start()

    def _beat(self) -> None:
        self._api.request("PUT", "/v1/owners/" + urllib.parse.quote(self.owner) + "/lease",
                          {"ttl_seconds": self.owner_ttl})

    def _heartbeat_loop(self) -> None:
        interval = self.owner_ttl / 3
        while not self._stop.wait(interval):
            try:
                self._beat()
            except (TetherError, OSError):
                # Transient: the next beat may succeed well within the lease.
                continue

    # -- the dcode provider shape -----------------------------------------

    def get_or_create(self, sandbox_id: Optional[str] = None, **kwargs: Any) -> TetherSandbox:
        """Return the sandbox sandbox_id, or create one and wait until it is ready.

        kwargs go into the create request: labels, env, setup, ttl_seconds,
        params, provider.
        """
        if self._closed:
            raise RuntimeError("provider is closed")
        if sandbox_id:
            _, info = self._api.request("GET", "/v1/sandboxes/" + urllib.parse.quote(sandbox_id))
            return TetherSandbox(self._api, info)
        body = {"provider": kwargs.pop("provider", self.provider), "owner": self.owner}
        body.update({k: v for k, v in kwargs.items() if v is not None})
        _, info = self._api.request("POST", "/v1/sandboxes", body)
        self._start_heartbeat()
        sb = TetherSandbox(self._api, info)
        waited = 0.0
        while sb.info["state"] in ("requested", "creating") and waited < self.ready_timeout:
            step = min(30.0, self.ready_timeout - waited)
            sb.refresh(wait=max(1.0, step))
            waited += step
        if sb.info["state"] != "ready":
            raise TetherError(409, "SANDBOX_STATE_CONFLICT",
                              f"sandbox {sb.id} is {sb.info['state']}: {sb.info.get('error') or sb.info.get('reason')}",
                              sb.info["state"])
        return sb

    def delete(self, sandbox_id: str) -> None:
        """Cancel or terminate the sandbox (idempotent)."""
        self._api.request("DELETE", "/v1/sandboxes/" + urllib.parse.quote(sandbox_id))

    def close(self) -> None:
        """Stop heartbeating and end the owner, which ends all its sandboxes."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join(timeout=5)
        try:
            self._api.request("DELETE", "/v1/owners/" + urllib.parse.quote(self.owner))
        except (TetherError, OSError):
            pass  # the lease lapses on its own

    def __enter__(self) -> "TetherProvider":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

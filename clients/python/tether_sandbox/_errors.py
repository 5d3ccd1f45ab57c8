"""The client's exception types: TetherError, and the one a closed provider raises."""

from __future__ import annotations

import json
from typing import Any, Optional

from ._compat import SandboxError

__all__ = ["TetherError", "TetherClosedError"]


class TetherError(SandboxError):
    """A failed Tether call.

    For an API error, ``status`` is the HTTP status and ``code``, ``detail``,
    ``state`` and ``request_id`` come from the problem document (see
    docs/errors.md). A request that never got an answer has ``status`` 0 and
    ``code`` ``TIMEOUT`` or ``CONNECTION_FAILED``; the transport's exception is
    the ``__cause__`` (dcode's ``original_exc``).

    It is a dcode ``SandboxError`` (deepagents-code's, when installed; a
    stand-in of the same shape otherwise), so that code written for dcode's
    other sandbox providers handles Tether's failures too.
    """

    def __init__(
        self,
        code: str,
        status: int,
        detail: str = "",
        state: Optional[str] = None,
        *,
        request_id: Optional[str] = None,
        problem: Optional[dict[str, Any]] = None,
        retry_after: Optional[float] = None,
    ) -> None:
        self.code = code
        self.status = status
        self.detail = detail
        self.state = state
        self.request_id = request_id
        self.problem: dict[str, Any] = dict(problem or {})
        self.retry_after = retry_after  # seconds, from Retry-After (429, 503)
        super().__init__(code, status, detail, state)

    def __str__(self) -> str:
        text = f"{self.status} {self.code}" if self.status else self.code
        if self.detail:
            text += f": {self.detail}"
        if self.state and self.state not in (self.detail or ""):
            text += f" (state {self.state})"
        return text

    def __repr__(self) -> str:
        return (
            f"TetherError(code={self.code!r}, status={self.status!r}, "
            f"detail={self.detail!r}, state={self.state!r})"
        )

    @classmethod
    def from_problem(
        cls, status: int, body: bytes, request_id: Optional[str] = None, retry_after: Optional[str] = None
    ) -> "TetherError":
        """The error a non-2xx response stands for (problem+json or not)."""
        problem: dict[str, Any] = {}
        try:
            parsed = json.loads(body or b"null")
            if isinstance(parsed, dict):
                problem = parsed
        except ValueError:
            pass
        detail = problem.get("detail")
        if not isinstance(detail, str):
            detail = body.decode("utf-8", "replace").strip()[:500] if body else ""
        return cls(
            str(problem.get("code") or f"HTTP_{status}"),
            int(problem.get("status") or status),
            detail,
            problem.get("state") or None,
            request_id=problem.get("request_id") or request_id,
            problem=problem,
            retry_after=_seconds(retry_after),
        )

    @classmethod
    def from_problem_dict(cls, problem: dict[str, Any]) -> "TetherError":
        """The error for a problem that arrived inside a stream."""
        status = int(problem.get("status") or 0)
        return cls(
            str(problem.get("code") or f"HTTP_{status}"),
            status,
            str(problem.get("detail") or ""),
            problem.get("state") or None,
            request_id=problem.get("request_id"),
            problem=problem,
        )


def _seconds(value: Optional[str]) -> Optional[float]:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None  # an HTTP date: not worth the parsing


class TetherClosedError(TetherError, RuntimeError):
    """A call on a closed TetherProvider (or on a sandbox of one): raised at
    once, without a request. Its code is ``NOT_INITIALIZED``, deepagents'
    code for a sandbox that is not (or no longer) usable."""

    def __init__(self, what: str = "this TetherProvider") -> None:
        super().__init__("NOT_INITIALIZED", 0, f"{what} is closed")

"""Checking a webhook delivery's signature (docs/webhooks.md)."""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import Optional, Union

__all__ = ["verify_signature", "SIGNATURE_HEADER", "DELIVERY_HEADER"]

SIGNATURE_HEADER = "Tether-Signature"
"""``t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">``."""

DELIVERY_HEADER = "Tether-Delivery"
"""The delivery's id: its idempotency key, the same on every attempt."""


def verify_signature(
    body: Union[bytes, str],
    header: Optional[str],
    secret: str,
    *,
    tolerance: float = 300.0,
    now: Optional[float] = None,
) -> bool:
    """Whether ``header`` (the Tether-Signature of a delivery) signs ``body``
    (the raw request body, before any JSON parsing) with the endpoint's
    ``secret``, at a time within ``tolerance`` seconds of ``now`` (default:
    the clock; ``tolerance=0`` skips the check). One matching ``v1`` among
    several is enough. Never raises on a malformed header: it is False."""
    if not header or not secret:
        return False
    raw = body.encode() if isinstance(body, str) else bytes(body)
    t: Optional[str] = None
    sigs: list[str] = []
    for part in header.split(","):
        k, sep, v = part.strip().partition("=")
        if not sep:
            continue
        if k == "t":
            t = v
        elif k == "v1":
            sigs.append(v)
    if t is None or not t.isdigit() or not sigs:
        return False
    if tolerance > 0 and abs((time.time() if now is None else now) - int(t)) > tolerance:
        return False
    want = hmac.new(secret.encode(), t.encode() + b"." + raw, hashlib.sha256).hexdigest()
    return any(hmac.compare_digest(s.encode(), want.encode()) for s in sigs)

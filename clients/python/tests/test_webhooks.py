"""Webhooks through Tether and AsyncTether against a live server (which
must allow loopback receivers: WEBHOOK_ALLOW_PRIVATE=true)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest

from conftest import KEY, LABELS, URL, live
from tether_sandbox import (
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    AsyncTether,
    Tether,
    TetherError,
    verify_signature,
)

pytestmark = live


class Receiver:
    """A webhook receiver on loopback that records every request."""

    def __init__(self) -> None:
        self.got: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with outer.lock:
                    outer.got.append(
                        {"delivery": self.headers.get(DELIVERY_HEADER), "signature": self.headers.get(SIGNATURE_HEADER), "body": body}
                    )
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def about(self, sandbox_id: str) -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.got if sandbox_id.encode() in r["body"]]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def wait_about(r: Receiver, sandbox_id: str, n: int, timeout: float = 30) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while len(r.about(sandbox_id)) < n:
        if time.monotonic() > deadline:
            raise AssertionError(f"{n} deliveries about {sandbox_id} never came; got {r.about(sandbox_id)}")
        time.sleep(0.05)
    return r.about(sandbox_id)


def test_webhooks_sync(client: Tether, receiver: Receiver):
    with pytest.raises(TetherError) as bad:
        client.create_webhook("http://127.0.0.1:1/", states=["nope"])
    assert (bad.value.code, bad.value.status) == ("INVALID_REQUEST", 400)

    made = client.create_webhook(receiver.url, description="py sync", states=["ready"])
    try:
        assert made.secret.startswith("whsec_") and made.webhook.state == "active"
        assert made.webhook.states == ["ready"] and made.webhook.reasons == []
        assert made.secret not in repr(made)
        assert any(w.id == made.webhook.id for w in client.list_webhooks())
        assert client.get_webhook(made.webhook.id).url == receiver.url

        sb = client.create_sandbox(provider="sim", labels=LABELS)
        try:
            first = wait_about(receiver, sb.id, 1)[0]
            assert verify_signature(first["body"], first["signature"], made.secret)
            assert not verify_signature(first["body"].replace(b"ready", b"failed"), first["signature"], made.secret)
            payload = json.loads(first["body"])
            assert payload["id"] == first["delivery"]
            event = next(e for e in payload["events"] if e["sandbox_id"] == sb.id)
            assert event["to"] == "ready"

            page = client.webhook_deliveries(made.webhook.id, limit=50)
            d = next(d for d in page.items if d.id == first["delivery"])
            assert (d.status, d.response_status) == ("delivered", 204) and event["id"] in d.event_ids

            again = client.replay_webhook(made.webhook.id, from_event_id=event["id"])
            assert again.state == "active"
            second = wait_about(receiver, sb.id, 2)[1]
            assert second["delivery"] != first["delivery"]
        finally:
            client.delete_sandbox(sb.id)
    finally:
        assert client.delete_webhook(made.webhook.id).id == made.webhook.id
    with pytest.raises(TetherError) as gone:
        client.get_webhook(made.webhook.id)
    assert gone.value.code == "NOT_FOUND"


def test_webhooks_async(receiver: Receiver):
    async def run() -> None:
        async with AsyncTether(URL, KEY) as t:
            made = await t.create_webhook(receiver.url, reasons=["requested"])
            try:
                sb = await t.create_sandbox(provider="sim", labels=LABELS)
                await t.delete_sandbox(sb.id)
                deadline = time.monotonic() + 30
                while not receiver.about(sb.id):
                    assert time.monotonic() < deadline, "the delete's event never came"
                    await asyncio.sleep(0.05)
                got = receiver.about(sb.id)[0]
                assert verify_signature(got["body"], got["signature"], made.secret)
                assert all(e["reason"] == "requested" for e in json.loads(got["body"])["events"])
                page = await t.webhook_deliveries(made.webhook.id)
                assert page.items and page.items[0].status in ("pending", "delivered")
                assert (await t.replay_webhook(made.webhook.id)).state == "active"
                assert [w.id for w in await t.list_webhooks()].count(made.webhook.id) == 1
                assert (await t.get_webhook(made.webhook.id)).reasons == ["requested"]
            finally:
                await t.delete_webhook(made.webhook.id)

    asyncio.run(run())

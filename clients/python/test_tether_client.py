"""Tests of tether_client against a live Tether.

Run by the Go test suite (test/e2e), which starts Tether and sets
TETHER_URL, TETHER_API_KEY and TETHER_JANITOR_INTERVAL. By hand:

    TETHER_URL=http://127.0.0.1:8080 TETHER_API_KEY=... python3 -m unittest -v test_tether_client
"""

import os
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tether_client import TetherError, TetherProvider  # noqa: E402

URL = os.environ.get("TETHER_URL")
KEY = os.environ.get("TETHER_API_KEY")
JANITOR_INTERVAL = float(os.environ.get("TETHER_JANITOR_INTERVAL", "5"))


def wait_for(provider, sandbox_id, predicate, timeout):
    """Poll the sandbox until predicate(info) holds; return (info, seconds)."""
    start = time.monotonic()
    while True:
        info = provider.get_or_create(sandbox_id=sandbox_id).info
        if predicate(info):
            return info, time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(f"sandbox {sandbox_id} never matched; last: {info}")
        time.sleep(0.1)


@unittest.skipUnless(URL and KEY, "needs a live Tether: set TETHER_URL and TETHER_API_KEY")
class TetherClientTest(unittest.TestCase):
    def setUp(self):
        self.provider = TetherProvider(URL, KEY, owner_ttl=5)
        self.addCleanup(self.provider.close)

    def test_execute_and_files(self):
        sb = self.provider.get_or_create()
        self.assertEqual(sb.info["state"], "ready")
        res = sb.execute("printf 'OPEN_SANDBOX_ALIVE\\n'")
        self.assertEqual((res.output, res.exit_code, res.truncated), ("OPEN_SANDBOX_ALIVE\n", 0, False))
        self.assertEqual(sb.execute("exit 7").exit_code, 7)
        timed = sb.execute("sleep 30", timeout=1)
        self.assertTrue(timed.timed_out)

        up = sb.upload_files([("/workspace/a.txt", b"alpha\x00beta"), ("/etc/nope", b"x")])
        self.assertIsNone(up[0].error)
        self.assertIsNotNone(up[1].error)
        down = sb.download_files(["/workspace/a.txt", "/workspace/missing"])
        self.assertEqual(down[0].content, b"alpha\x00beta")
        self.assertIsNone(down[0].error)
        self.assertIsNone(down[1].content)
        self.assertIsNotNone(down[1].error)

        same = self.provider.get_or_create(sandbox_id=sb.id)
        self.assertEqual(same.id, sb.id)

        self.provider.delete(sandbox_id=sb.id)
        self.provider.delete(sandbox_id=sb.id)  # idempotent
        with self.assertRaises(TetherError) as ctx:
            sb.execute("true")
        self.assertEqual((ctx.exception.status, ctx.exception.code, ctx.exception.state),
                         (409, "SANDBOX_STATE_CONFLICT", "terminated"))

    def test_close_ends_the_owners_sandboxes(self):
        provider = TetherProvider(URL, KEY, owner_ttl=30)
        a, b = provider.get_or_create(), provider.get_or_create()
        provider.close()
        for sb in (a, b):
            info = sb.refresh()
            self.assertEqual((info["state"], info["reason"]), ("terminated", "owner_released"))

    def test_heartbeat_keeps_the_owner_alive(self):
        sb = self.provider.get_or_create()
        time.sleep(self.provider.owner_ttl + JANITOR_INTERVAL + 1)
        self.assertEqual(sb.refresh()["state"], "ready")

    def test_sigkill_of_the_owner_process_ends_its_sandbox(self):
        owner_ttl = 3
        child = subprocess.Popen(
            [sys.executable, "-c", (
                "import sys, time\n"
                f"sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})\n"
                "from tether_client import TetherProvider\n"
                f"p = TetherProvider({URL!r}, {KEY!r}, owner_ttl={owner_ttl})\n"
                "print(p.get_or_create().id, flush=True)\n"
                "time.sleep(3600)\n"
            )],
            stdout=subprocess.PIPE, text=True)
        try:
            sandbox_id = child.stdout.readline().strip()
            self.assertTrue(sandbox_id.startswith("sbx_"), sandbox_id)
            self.assertEqual(self.provider.get_or_create(sandbox_id=sandbox_id).info["state"], "ready")
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
            child.stdout.close()
        info, took = wait_for(self.provider, sandbox_id, lambda i: i["state"] != "ready",
                              timeout=owner_ttl + JANITOR_INTERVAL + 10)
        self.assertEqual((info["state"], info["reason"]), ("terminated", "owner_expired"))
        # The lease was last renewed at most owner_ttl/3 before the kill;
        # one janitor interval and a little slack for a loaded machine.
        self.assertLessEqual(took, owner_ttl + JANITOR_INTERVAL + 3)
        info, _ = wait_for(self.provider, sandbox_id, lambda i: i["released"], timeout=30)
        self.assertTrue(info["released"])


if __name__ == "__main__":
    unittest.main()

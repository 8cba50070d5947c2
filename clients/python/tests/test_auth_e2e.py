"""Bearer tokens made with `kvgov token add`: 401 without, 403 for a missing role."""

from __future__ import annotations

import unittest
from collections.abc import Callable
from typing import Any

from kvgov_client import KvgovError, tool_result
from kvgov_harness import KvgovDaemon, engine, prompt, wait_until


class AuthTest(unittest.TestCase):
    daemon: KvgovDaemon
    reader: str
    ingest: str
    tenant_router: str

    @classmethod
    def setUpClass(cls) -> None:
        cls.daemon = KvgovDaemon(engine("w1"))
        cls.addClassCleanup(cls.daemon.stop)
        # Tokens exist before the daemon starts: authentication is on from
        # its first answer.
        cls.reader = cls.daemon.add_token("reader", "read")
        cls.ingest = cls.daemon.add_token("ingest", "ingest")
        cls.tenant_router = cls.daemon.add_token("acme-gw", "route", "read", tenant="acme")
        cls.daemon.start()

    def assert_fails(self, status: int, code: str, call: Callable[..., Any], *args: Any,
                     **kwargs: Any) -> KvgovError:
        with self.assertRaises(KvgovError) as caught:
            call(*args, **kwargs)
        self.assertEqual((caught.exception.status, caught.exception.code), (status, code),
                         caught.exception.message)
        return caught.exception

    def test_the_secret_is_printed_alone_on_the_last_line(self) -> None:
        self.assertRegex(self.reader, r"^kvgov_[0-9a-f]{64}$")

    def test_no_token_or_a_wrong_one_is_401(self) -> None:
        anonymous = self.daemon.client()
        self.assertTrue(anonymous.healthy())  # /healthz stays open
        self.assert_fails(401, "unauthenticated", anonymous.workers)
        self.assert_fails(401, "unauthenticated", anonymous.emit, [])
        forged = self.daemon.client("kvgov_" + "0" * 64)
        error = self.assert_fails(401, "unauthenticated", forged.workers)
        self.assertNotIn("0" * 64, error.message)  # never echoes the token

    def test_roles(self) -> None:
        reader = self.daemon.client(self.reader)
        self.assertEqual([w["id"] for w in reader.workers()], ["w1"])
        self.assertIn("kvgov_cache_events_total", reader.metrics_text())
        error = self.assert_fails(403, "permission_denied", reader.emit,
                                  [tool_result("a:b:1", "miss")])
        self.assertIn("reader", error.message)
        self.assert_fails(403, "permission_denied", reader.route, "m", prompt(16))
        ingest = self.daemon.client(self.ingest)
        self.assertEqual(ingest.emit([tool_result("a:b:1", "miss")]).accepted, 1)
        self.assert_fails(403, "permission_denied", ingest.workers)

    def test_a_tenant_bound_token_acts_for_its_tenant_only(self) -> None:
        acme = self.daemon.client(self.tenant_router)
        decision = acme.route("m", prompt(16))  # tenant absent means acme
        acme.done(decision.decision_id)
        self.assertEqual(acme.route("m", prompt(16), tenant="acme").cache_salt,
                         decision.cache_salt)
        self.assertRegex(decision.cache_salt, r"^[0-9a-f]{32}$")
        self.assert_fails(403, "permission_denied", acme.route, "m", prompt(16),
                          tenant="globex")
        self.assert_fails(403, "permission_denied", acme.metrics_text)
        # Workers without block counts or stream statistics.
        (worker,) = acme.workers()
        self.assertNotIn("blocks", worker)

    def test_a_token_added_while_running_is_picked_up(self) -> None:
        secret = self.daemon.add_token("late-admin", "admin")
        admin = self.daemon.client(secret)

        def accepted() -> bool:
            try:
                admin.quarantine("m", "late", token_ids=prompt(16, seed=30))
                return True
            except KvgovError as error:
                self.assertEqual(error.status, 401)
                return False

        wait_until(accepted, timeout=5, what="the new token to be picked up")


if __name__ == "__main__":
    unittest.main()

"""POST /v1/route and /done, residency placed by transports, tenant salts, quarantine."""

from __future__ import annotations

import re
import unittest

from kvgov_client import KvgovError, RouteDecision, kv_transfer
from kvgov_harness import DaemonTestCase, engine, prompt

BLOCK = 16  # the engines' default block size


class RoutingTest(DaemonTestCase):
    DAEMON_ARGS = [*engine("w1"), *engine("w2"), *engine("x1", model="other"),
                   "--admit", "transport=fleet"]

    def place(self, worker: str, tokens: list[int], tier: str = "hbm",
              cache_salt: str | None = None) -> None:
        result = self.client.emit([kv_transfer("store", f"span-{worker}-{tokens[0]}",
                                               tokens=len(tokens), to_tier=tier,
                                               owner="transport", worker=worker,
                                               token_ids=tokens, cache_salt=cache_salt)])
        self.assertEqual((result.accepted, result.rejected), (1, []))

    def route(self, *args, **kwargs) -> RouteDecision:
        decision = self.client.route(*args, **kwargs)
        self.addCleanup(self._release, decision.decision_id)
        return decision

    def _release(self, decision_id: str) -> None:
        try:
            self.client.done(decision_id)
        except KvgovError:
            pass  # the test released it itself

    def test_cold_route_then_done(self) -> None:
        decision = self.client.route("m", prompt(40, seed=10))
        self.assertIn(decision.worker, ("w1", "w2"))
        self.assertRegex(decision.decision_id, r"^[0-9a-f]{32}$")
        self.assertEqual((decision.prompt_blocks, decision.overlap_blocks), (2, 0))
        self.assertEqual((decision.verdict.kind, decision.verdict.reason), ("miss", "cold"))
        self.assertEqual(decision.cache_salt, "")
        self.assertEqual({c["worker"] for c in decision.candidates}, {"w1", "w2"})
        loads = {w["id"]: w["load"]["in_flight_requests"] for w in self.client.workers()}
        self.assertEqual(loads[decision.worker], 1)
        self.assertTrue(self.client.done(decision.decision_id))
        loads = {w["id"]: w["load"]["in_flight_requests"] for w in self.client.workers()}
        self.assertEqual(loads[decision.worker], 0)
        with self.assertRaises(KvgovError) as caught:
            self.client.done(decision.decision_id)
        self.assertEqual((caught.exception.status, caught.exception.code), (404, "not_found"))

    def test_a_transport_report_earns_overlap(self) -> None:
        tokens = prompt(3 * BLOCK + 5, seed=11)
        self.place("w2", tokens[:2 * BLOCK])
        decision = self.route("m", tokens)
        self.assertEqual(decision.worker, "w2")
        self.assertEqual((decision.prompt_blocks, decision.overlap_blocks), (3, 2))
        self.assertEqual(str(decision.verdict), "hit")
        best = decision.candidates[0]
        self.assertEqual((best["worker"], best["tier_overlap"]["hbm"]), ("w2", 2))

    def test_colder_tiers_earn_less_credit(self) -> None:
        tokens = prompt(2 * BLOCK, seed=12)
        self.place("w1", tokens, tier="disk")
        decision = self.route("m", tokens, workers=["w1"])
        self.assertEqual(decision.overlap_blocks, 2)
        self.assertEqual(decision.candidates[0]["credited_blocks"], 1.0)  # 2 x disk 0.5

    def test_tenant_salts_separate_tenants(self) -> None:
        tokens = prompt(2 * BLOCK, seed=13)

        def released(**kwargs) -> RouteDecision:
            # Released at once: a decision still prefilling is credited on
            # its worker to the next request of its own tenant.
            decision = self.route("m", tokens, **kwargs)
            self.assertTrue(self.client.done(decision.decision_id))
            return decision

        acme = released(tenant="acme")
        self.assertRegex(acme.cache_salt, r"^[0-9a-f]{32}$")
        self.assertEqual(released(tenant="acme").cache_salt, acme.cache_salt)
        self.assertNotEqual(released(tenant="globex").cache_salt, acme.cache_salt)
        # The engine stored the prompt under acme's salt: only acme matches it.
        self.place("w1", tokens, cache_salt=acme.cache_salt)
        self.assertEqual(released(tenant="acme").overlap_blocks, 2)
        self.assertEqual(released(tenant="globex").overlap_blocks, 0)
        self.assertEqual(released().overlap_blocks, 0)

    def test_quarantine_stops_credit(self) -> None:
        tokens = prompt(3 * BLOCK, seed=14)
        self.place("w1", tokens)
        self.assertEqual(self.route("m", tokens, workers=["w1"]).overlap_blocks, 3)
        # Quarantine the first block: it and every block extending it lose credit.
        answer = self.client.quarantine("m", "poisoned prefix", token_ids=tokens[:BLOCK])
        self.assertEqual((answer["blocks"], answer["reason"]), (1, "poisoned prefix"))
        # A prompt crossing it goes out under a diverted salt, and only to an
        # engine proven to key by the salt: w1 never showed one, so none.
        with self.assertRaises(KvgovError) as refused:
            self.route("m", tokens, workers=["w1"])
        self.assertEqual(refused.exception.status, 503)
        candidate = refused.exception.body["candidates"][0]
        # Keyed under the diverted salt, nothing of the poisoned copy matches.
        self.assertEqual((candidate["overlap_blocks"], candidate["resident_blocks"]), (0, 0))
        self.assertEqual(candidate["reason"], "salt_unverified")
        self.assertIn(".", refused.exception.body["cache_salt"])
        self.assertIn(answer["id"], [q["id"] for q in self.client.quarantines()])
        self.assertGreaterEqual(self.metric("kvgov_quarantined_blocks"), 1)
        kinds = [row["kind"] for row in self.client.journal(limit=1000)["rows"]]
        self.assertIn("quarantine", kinds)

    def test_route_errors(self) -> None:
        with self.assertRaises(KvgovError) as caught:
            self.client.route("no-such-model", prompt(16))
        self.assertEqual((caught.exception.status, caught.exception.code), (404, "not_found"))
        with self.assertRaises(KvgovError) as caught:
            self.client.route("m", prompt(16), workers=["x1"])
        error = caught.exception
        self.assertEqual((error.status, error.code), (503, "unavailable"))
        self.assertEqual({c["reason"] for c in error.body["candidates"]}, {"not_allowed"})
        with self.assertRaises(KvgovError) as caught:
            self.client.route("", prompt(16))
        self.assertEqual(caught.exception.status, 400)
        self.assertTrue(re.match(r"^\$\.model: ", caught.exception.message))

    def test_a_draining_worker_is_skipped(self) -> None:
        self.client.set_draining("x1")
        try:
            with self.assertRaises(KvgovError) as caught:
                self.client.route("other", prompt(16))
            self.assertEqual(caught.exception.body["candidates"][0]["reason"], "draining")
        finally:
            self.client.set_draining("x1", False)
        self.assertEqual(self.route("other", prompt(16)).worker, "x1")


if __name__ == "__main__":
    unittest.main()

"""Invalidations without a control URL, NIXL leases, the journal and the issuer."""

from __future__ import annotations

import hashlib
import json
import unittest
from typing import Any

from kvgov_client import KvgovError, journal_row_hash, kv_transfer, nixl_lease
from kvgov_harness import DaemonTestCase, engine, prompt


class GovernanceTest(DaemonTestCase):
    DAEMON_ARGS = [*engine("w1"), "--admit", "transport=fleet"]

    def test_an_owner_without_a_control_url_fails_the_directive(self) -> None:
        tokens = prompt(32, seed=20)
        self.client.emit([kv_transfer("store", "span", to_tier="hbm", owner="transport",
                                      worker="w1", token_ids=tokens)])
        created = self.client.invalidate("m", "erasure request", token_ids=tokens)
        self.assertRegex(created["id"], r"^[0-9a-f]{32}$")
        directive = self.client.wait_for_invalidation(created["id"], timeout=10)
        self.assertEqual((directive["state"], directive["failure"]),
                         ("failed", "owner_unreachable"))
        self.assertEqual(directive["certificate_id"], "")
        (owner,) = directive["owners"]
        self.assertEqual((owner["worker"], owner["targets"]), ("w1", 2))
        self.assertIn("no control URL", owner["last_error"])
        # Nobody saw the blocks go, so they stay without credit.
        decision = self.client.route("m", tokens)
        self.assertEqual(decision.overlap_blocks, 0)
        self.client.done(decision.decision_id)
        # Waiting for a state it never reaches times out.
        with self.assertRaises(TimeoutError):
            self.client.wait_for_invalidation(created["id"], states=("certified",),
                                              timeout=0.2)

    def test_a_span_nobody_holds_is_refused_by_the_referee(self) -> None:
        created = self.client.invalidate("m", "nothing there", token_ids=prompt(16, seed=21))
        directive = self.client.wait_for_invalidation(created["id"], timeout=10)
        self.assertEqual(directive["state"], "failed")
        self.assertTrue(directive["failure"].startswith("referee_denied"), directive["failure"])

    def test_invalidation_errors(self) -> None:
        with self.assertRaises(KvgovError) as caught:
            self.client.invalidate("m", "tenant-wide", scope="tenant")
        self.assertEqual((caught.exception.status, caught.exception.code),
                         (400, "invalid_argument"))
        with self.assertRaises(KvgovError) as caught:
            self.client.invalidation("0" * 32)
        self.assertEqual(caught.exception.status, 404)
        with self.assertRaises(KvgovError) as caught:
            self.client.certificate("0" * 64)
        self.assertEqual((caught.exception.status, caught.exception.code), (404, "not_found"))

    def test_a_lease_is_a_monotonic_state_machine(self) -> None:
        tokens = prompt(16, seed=22)

        def lease(event: str, **fields: Any) -> dict[str, Any]:
            return nixl_lease("lease-g", event, "prefill_pin", remote_engine="w1",
                              span_digest="lease-span", **fields)

        result = self.client.emit([
            lease("create", ttl_ms=60_000, token_ids=tokens),
            lease("heartbeat"),
            lease("transfer_complete"),
        ])
        self.assertEqual((result.accepted, result.rejected), (3, []))
        state = {row["lease_id"]: row for row in self.client.leases()}["lease-g"]
        self.assertEqual((state["state"], state["event"]), ("completed", "transfer_complete"))
        # An ended lease never revives.
        result = self.client.emit([lease("heartbeat")])
        self.assertEqual(result.accepted, 0)
        self.assertIn("cannot revive", result.rejected[0].error)
        self.assertGreaterEqual(self.metric("kvgov_lease_rejections_total"), 1)
        self.assertEqual(self.metric("kvgov_lease_transitions_total", to="completed"), 1)

    def test_the_journal_is_a_hash_chain(self) -> None:
        marker = self.client.quarantine("m", "journal test", token_ids=prompt(16, seed=23))
        first = self.client.journal(since=1, limit=1)
        self.assertEqual([row["seq"] for row in first["rows"]], [1])
        self.assertEqual(first["next_since"], 2)
        answer = self.client.journal(since=1, limit=1000)
        rows = answer["rows"]
        self.assertNotIn("next_since", answer)
        self.assertEqual([row["seq"] for row in rows], list(range(1, answer["head_seq"] + 1)))
        self.assertEqual(rows[0]["prev_hash"], "0" * 64)
        for prev, row in zip([None, *rows], rows):
            self.assertEqual(row["hash"], journal_row_hash(row), row["seq"])
            self.assertEqual(row["payload_digest"],
                             hashlib.sha256(row["payload"].encode()).hexdigest())
            if prev is not None:
                self.assertEqual(row["prev_hash"], prev["hash"])
        quarantine = [row for row in rows if row["subject"] == marker["id"]]
        self.assertEqual([row["kind"] for row in quarantine], ["quarantine"])
        self.assertEqual(json.loads(quarantine[0]["payload"])["reason"], "journal test")
        # Who did it: a loopback call while no token exists; the daemon's own
        # start-up row names kvgov; a single node names no replica.
        self.assertEqual(quarantine[0]["actor"], "local")
        self.assertEqual(rows[0]["kind"], "serve.start")
        self.assertEqual(rows[0]["actor"], "kvgov")
        self.assertTrue(all(row["format_version"] == 2 and row["origin"] == "" for row in rows))
        # A tampered row no longer hashes to itself, the actor included.
        self.assertNotEqual(journal_row_hash({**rows[0], "kind": "forged"}), rows[0]["hash"])
        self.assertNotEqual(journal_row_hash({**rows[0], "actor": "token:x"}), rows[0]["hash"])

    def test_the_issuer_key_id_is_bound_to_the_key(self) -> None:
        issuer = self.client.issuer()
        self.assertEqual(issuer["algorithm"], "ed25519")
        self.assertRegex(issuer["public_key"], r"^[0-9a-f]{64}$")
        self.assertEqual(issuer["key_id"],
                         hashlib.sha256(bytes.fromhex(issuer["public_key"])).hexdigest()[:16])


if __name__ == "__main__":
    unittest.main()

"""POST /v1/events against a live kvgov: each event type, rejections, /metrics."""

from __future__ import annotations

import unittest

from kvgov_client import (
    Client,
    KvgovError,
    kv_transfer,
    metric_value,
    nixl_lease,
    provider_cache,
    provider_cache_from_anthropic_usage,
    tool_result,
    tool_result_key,
)
from kvgov_harness import DaemonTestCase, engine, prompt, unused_port

EVENTS = "kvgov_cache_events_total"


class EventsTest(DaemonTestCase):
    DAEMON_ARGS = [*engine("w1"), "--admit", "transport=fleet", "--max-body-bytes", "65536"]

    def test_each_event_type_is_accepted_and_counted(self) -> None:
        before = self.client.metrics_text()
        tokens = prompt(32, seed=1)
        events = [
            kv_transfer("store", "span-a", tokens=32, to_tier="hbm", owner="transport",
                        worker="w1", token_ids=tokens, bytes_moved=4096),
            nixl_lease("lease-a", "create", "prefill_pin", remote_engine="w1",
                       span_digest="span-a", tokens=32, ttl_ms=60_000, token_ids=tokens),
            provider_cache("openai", "gpt-4o", cached_tokens=1024, prompt_tokens=2000,
                           breakpoint_mode="auto", retention="5m"),
            provider_cache_from_anthropic_usage(
                {"input_tokens": 10, "cache_read_input_tokens": 500,
                 "cache_creation_input_tokens": 0}, "claude"),
            tool_result(tool_result_key("search", "ab12", 1), "fill", result_digest="r1",
                        size_bytes=100),
        ]
        result = self.client.emit(events)
        self.assertEqual(result.rejected, [])
        self.assertEqual(result.accepted, len(events))

        after = self.client.metrics_text()

        def delta(name: str, **labels: str) -> float:
            return metric_value(after, name, **labels) - metric_value(before, name, **labels)

        self.assertEqual(delta(EVENTS, source="ride_engine", plane="kv_transfer",
                               direction="store", outcome="ok"), 1)
        # The NIXL lease lowers onto the kv_transfer plane too.
        self.assertEqual(delta(EVENTS, source="ride_engine", plane="kv_transfer"), 2)
        self.assertEqual(delta(EVENTS, source="provider", plane="provider"), 2)
        self.assertEqual(delta(EVENTS, source="tool_result", plane="tool_result"), 1)
        self.assertEqual(delta("kvgov_bytes_moved_total", source="ride_engine", to_tier="hbm"),
                         4096)
        # Provider cache reads are credited to the provider, whatever the verdict.
        self.assertEqual(delta("kvgov_prefill_tokens_saved_total", source="provider"), 1524)
        self.assertEqual(delta("kvgov_lease_transitions_total", to="active"), 1)
        # The store moved residency: two 16-token blocks in HBM on w1.
        (w1,) = self.client.workers()
        self.assertGreaterEqual(w1["blocks"]["hbm"], 2)
        leases = {lease["lease_id"]: lease for lease in self.client.leases()}
        self.assertEqual(leases["lease-a"]["state"], "active")

    def test_a_bad_element_is_rejected_alone(self) -> None:
        result = self.client.emit([
            tool_result("a:b:1", "miss"),
            kv_transfer("Store", "s"),
            tool_result("no-colons", "fill", result_digest="r"),
            kv_transfer("store", "s", to_tier="hbm", owner="transport", worker="nope",
                        token_ids=prompt(16)),
            provider_cache("openai", "gpt-4o", retention="5 minutes"),
            provider_cache("openai", ""),
        ])
        self.assertEqual(result.accepted, 1)
        errors = {r.index: r.error for r in result.rejected}
        self.assertEqual(sorted(errors), [1, 2, 3, 4, 5])
        self.assertTrue(errors[1].startswith("$.events[1].direction: unknown kv transfer "
                                             "direction 'Store'"), errors[1])
        self.assertTrue(errors[2].startswith("$.events[2].key: "), errors[2])
        self.assertIn("'nope' is not registered", errors[3])
        self.assertTrue(errors[4].startswith("$.events[4].retention: "), errors[4])
        self.assertTrue(errors[5].startswith("$.events[5].model_id: "), errors[5])

    def test_an_unadmitted_owner_moves_no_residency(self) -> None:
        tokens = prompt(48, seed=2)
        result = self.client.emit([kv_transfer("store", "span-x", to_tier="dram",
                                               owner="stranger", worker="w1", token_ids=tokens)])
        self.assertEqual(result.accepted, 0)
        self.assertIn("'stranger' is not admitted", result.rejected[0].error)
        decision = self.client.route("m", tokens)
        self.assertEqual(decision.overlap_blocks, 0)
        self.client.done(decision.decision_id)

    def test_whole_body_errors_raise(self) -> None:
        big = [tool_result("a:b:1", "miss")] * 2000  # over --max-body-bytes 65536
        with self.assertRaises(KvgovError) as caught:
            self.client.emit(big)
        self.assertEqual((caught.exception.status, caught.exception.code),
                         (413, "resource_exhausted"))
        with self.assertRaises(KvgovError) as caught:
            self.client.invalidation("not-an-id")
        self.assertEqual((caught.exception.status, caught.exception.code), (404, "not_found"))

    def test_unreachable_kvgov_is_an_error_too(self) -> None:
        with self.assertRaises(KvgovError) as caught:
            Client(f"http://127.0.0.1:{unused_port()}", timeout=2).workers()
        self.assertEqual((caught.exception.status, caught.exception.code), (0, "unavailable"))


if __name__ == "__main__":
    unittest.main()

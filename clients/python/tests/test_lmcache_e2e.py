"""The LMCache reporter moving residency in a live kvgov, and the buffered emitter."""

from __future__ import annotations

import unittest

from kvgov_client import BufferedEmitter, Client, LMCacheReporter, digest_token_ids, tool_result
from kvgov_harness import DaemonTestCase, engine, prompt, unused_port

BLOCK = 16


class LMCacheReporterTest(DaemonTestCase):
    DAEMON_ARGS = [*engine("w1"), *engine("w2"), "--admit", "lmcache=fleet"]

    def setUp(self) -> None:
        self.emitter = BufferedEmitter(self.client, flush_interval=0.01)
        self.addCleanup(self.emitter.close)
        self.reporter = LMCacheReporter(self.emitter, "w1", model_id="m")

    def blocks(self, worker: str) -> dict[str, int]:
        self.assertTrue(self.emitter.flush(timeout=10))
        return {w["id"]: w["blocks"] for w in self.client.workers()}[worker]

    def credit(self, tokens: list[int], tenant: str | None = None) -> tuple[int, float]:
        self.assertTrue(self.emitter.flush(timeout=10))
        decision = self.client.route("m", tokens, tenant=tenant, workers=["w1"])
        self.client.done(decision.decision_id)
        return decision.overlap_blocks, decision.candidates[0]["credited_blocks"]

    def test_offload_restore_evict_move_residency(self) -> None:
        tokens = prompt(3 * BLOCK, seed=40)
        start = self.blocks("w1")
        self.reporter.on_offload(tokens, "LocalCPUBackend", bytes_moved=3 << 20)
        after_offload = self.blocks("w1")
        self.assertEqual(after_offload["dram"] - start["dram"], 3)
        self.assertEqual(self.credit(tokens), (3, 2.25))  # dram credit 0.75

        self.reporter.on_restore(tokens, "LocalCPUBackend")
        after_restore = self.blocks("w1")
        self.assertEqual(after_restore["hbm"] - start["hbm"], 3)
        self.assertEqual(after_restore["dram"], after_offload["dram"])  # the copy stays
        self.assertEqual(self.credit(tokens), (3, 3.0))

        self.reporter.on_evict(tokens, "LocalCPUBackend")
        after_evict = self.blocks("w1")
        self.assertEqual(after_evict["dram"], start["dram"])
        self.assertEqual(after_evict["hbm"], after_restore["hbm"])

        self.reporter.on_evict(tokens, "gpu")
        self.assertEqual(self.credit(tokens), (0, 0.0))
        stats = self.emitter.stats
        self.assertEqual((stats.accepted, stats.rejected, stats.failed, stats.dropped),
                         (4, 0, 0, 0))
        self.assertGreaterEqual(self.metric("kvgov_bytes_moved_total", from_tier="hbm",
                                            to_tier="dram"), 3 << 20)

    def test_a_chunk_report_covers_its_prefix(self) -> None:
        tokens = prompt(4 * BLOCK, seed=41)
        # The second 32-token chunk, offloaded to disk: the prefix through its end.
        self.reporter.on_offload(tokens, "LocalDiskBackend", start=2 * BLOCK, end=4 * BLOCK)
        self.reporter.on_offload(prompt(2 * BLOCK, seed=42), "disk", end=BLOCK)
        self.assertEqual(self.credit(tokens), (4, 2.0))  # disk credit 0.5
        self.assertEqual(self.credit(prompt(2 * BLOCK, seed=42))[0], 1)

    def test_tenant_salted_chunks_match_only_their_tenant(self) -> None:
        tokens = prompt(2 * BLOCK, seed=43)
        salt = self.client.route("m", tokens, tenant="acme").cache_salt
        self.reporter.on_offload(tokens, "dram", cache_salt=salt)
        self.assertEqual(self.credit(tokens, tenant="acme")[0], 2)
        self.assertEqual(self.credit(tokens, tenant="globex")[0], 0)

    def test_a_missed_restore_moves_nothing(self) -> None:
        tokens = prompt(BLOCK, seed=44)
        self.reporter.on_restore(tokens, "RemoteBackend", ok=False)
        self.assertEqual(self.credit(tokens), (0, 0.0))
        self.assertEqual(self.emitter.stats.accepted, 1)

    def test_an_unadmitted_owner_is_rejected_and_counted(self) -> None:
        tokens = prompt(BLOCK, seed=45)
        LMCacheReporter(self.emitter, "w1", owner="rogue").on_offload(tokens, "dram")
        LMCacheReporter(self.emitter, "nope").on_offload(tokens, "dram")
        self.assertEqual(self.credit(tokens), (0, 0.0))
        stats = self.emitter.stats
        self.assertEqual((stats.accepted, stats.rejected), (0, 2))
        self.assertIn("'nope' is not registered", stats.last_error)

    def test_a_bad_call_never_raises(self) -> None:
        self.reporter.on_offload(None, "dram")  # type: ignore[arg-type]
        self.reporter.on_offload([1, 2.5], "dram")  # type: ignore[list-item]
        self.reporter.on_offload([1, 2], "dram", start=5)
        self.assertEqual(self.reporter.errors, 3)
        self.assertEqual(self.emitter.stats.submitted, 0)

    def test_the_default_span_digest_is_kvgovs_token_digest(self) -> None:
        captured: list[dict] = []

        class Capture(BufferedEmitter):
            def submit(self, event):  # type: ignore[override]
                captured.append(dict(event))

        emitter = Capture(self.client)
        self.addCleanup(emitter.close)
        LMCacheReporter(emitter, "w1").on_evict([1, 2, 3, 4], "disk", start=2)
        (event,) = captured
        self.assertEqual(event["span_digest"], digest_token_ids([1, 2, 3, 4]))
        self.assertEqual((event["direction"], event["from_tier"], event["tokens"]),
                         ("evict", "disk", 2))
        self.assertNotIn("to_tier", event)


class BufferedEmitterTest(DaemonTestCase):
    DAEMON_ARGS = [*engine("w1")]

    def test_batches_everything_it_is_given(self) -> None:
        with BufferedEmitter(self.client, max_batch=256, flush_interval=0.01) as emitter:
            for i in range(600):
                emitter.submit(tool_result(f"t:{i}:1", "miss"))
        stats = emitter.stats
        self.assertEqual((stats.submitted, stats.accepted, stats.pending), (600, 600, 0))
        emitter.submit(tool_result("t:late:1", "miss"))
        self.assertEqual(emitter.stats.dropped, 1)  # closed

    def test_an_unreachable_kvgov_is_counted_not_raised(self) -> None:
        dead = Client(f"http://127.0.0.1:{unused_port()}", timeout=2)
        emitter = BufferedEmitter(dead, flush_interval=0.01)
        for i in range(5):
            emitter.submit(tool_result(f"t:{i}:1", "miss"))
        self.assertTrue(emitter.flush(timeout=10))
        emitter.close()
        stats = emitter.stats
        self.assertEqual((stats.failed, stats.accepted), (5, 0))
        self.assertIn("unavailable", stats.last_error)

    def test_a_full_queue_drops(self) -> None:
        # A long fill window keeps the batch queued while it overflows.
        emitter = BufferedEmitter(self.client, max_queue=2, flush_interval=30)
        for i in range(5):
            emitter.submit(tool_result(f"t:{i}:1", "miss"))
        self.assertEqual(emitter.stats.dropped, 3)
        self.assertEqual(emitter.stats.last_error, "queue full")
        emitter.close()
        self.assertEqual(emitter.stats.accepted, 2)


if __name__ == "__main__":
    unittest.main()

"""The event builders, the request bodies the client sends, and helpers, without a daemon."""

from __future__ import annotations

import unittest
from collections.abc import Mapping
from typing import Any

from kvgov_client import (
    Client,
    KvgovError,
    digest_token_ids,
    kv_transfer,
    metric_value,
    nixl_lease,
    parse_metrics,
    provider_cache,
    tool_result,
    tool_result_key,
)
from kvgov_client.client import _error_from


class _RecordingClient(Client):
    """Records each JSON call instead of sending it."""

    def __init__(self) -> None:
        super().__init__("http://127.0.0.1:1")
        self.calls: list[tuple[str, str, Any]] = []

    def _json(self, method: str, path: str, body: Any = None,
              query: Mapping[str, Any] | None = None) -> Any:
        self.calls.append((method, path, body))
        return {"id": "d1", "state": "planned", "owners": []}


class BuildersTest(unittest.TestCase):
    def test_kv_transfer_is_flat_and_omits_unset_fields(self) -> None:
        event = kv_transfer("restore", "span-1", tokens=512, from_tier="disk", to_tier="hbm",
                            outcome="ok", bytes_moved=1 << 20, worker="w1",
                            token_ids=range(1, 17), cache_salt="abc")
        self.assertEqual(event, {
            "type": "kv_transfer", "direction": "restore", "span_digest": "span-1",
            "tokens": 512, "from_tier": "disk", "to_tier": "hbm", "outcome": "ok",
            "bytes_moved": 1048576, "worker": "w1", "token_ids": list(range(1, 17)),
            "cache_salt": "abc"})
        self.assertNotIn("span", event)
        self.assertEqual(kv_transfer("route", "s"),
                         {"type": "kv_transfer", "direction": "route", "span_digest": "s"})

    def test_integers_must_be_integers(self) -> None:
        # kvgov rejects 2.0 and true for an int64; so does the builder, early.
        with self.assertRaises(TypeError):
            kv_transfer("store", "s", tokens=2.0)  # type: ignore[arg-type]
        with self.assertRaises(TypeError):
            kv_transfer("store", "s", tokens=True)
        with self.assertRaises(TypeError):
            kv_transfer("store", "s", token_ids=[1, "2"])  # type: ignore[list-item]
        with self.assertRaises(TypeError):
            kv_transfer("store", "s", token_ids="123")  # type: ignore[arg-type]
        with self.assertRaises(ValueError):
            kv_transfer("store", "s", block_hashes=[-1])
        with self.assertRaises(ValueError):
            kv_transfer("store", "s", tokens=2**63)
        with self.assertRaises(TypeError):
            kv_transfer("store", 7)  # type: ignore[arg-type]

    def test_vocabulary_is_the_servers_to_judge(self) -> None:
        self.assertEqual(kv_transfer("Store", "s")["direction"], "Store")

    def test_nixl_lease(self) -> None:
        self.assertEqual(
            nixl_lease("L1", "create", "prefill_pin", remote_engine="w1", span_digest="d",
                       ttl_ms=500, token_ids=[1, 2]),
            {"type": "nixl_lease", "lease_id": "L1", "event": "create", "role": "prefill_pin",
             "remote_engine": "w1", "span_digest": "d", "ttl_ms": 500, "token_ids": [1, 2]})

    def test_provider_cache_and_tool_result(self) -> None:
        self.assertEqual(provider_cache("openai", "gpt-4o", cached_tokens=3, region="eu"),
                         {"type": "provider_cache", "provider": "openai", "model_id": "gpt-4o",
                          "cached_tokens": 3, "region": "eu"})
        key = tool_result_key("search", "ab12", 3)
        self.assertEqual(key, "search:ab12:3")
        self.assertEqual(tool_result(key, "fill", result_digest="r", size_bytes=10),
                         {"type": "tool_result", "key": "search:ab12:3", "event": "fill",
                          "result_digest": "r", "size_bytes": 10})
        with self.assertRaises(ValueError):
            tool_result_key("a:b", "c", 1)
        with self.assertRaises(ValueError):
            tool_result_key("a", "", 1)

    def test_digest_token_ids_matches_the_documented_vectors(self) -> None:
        # docs/formats/envelope.md section 6.
        self.assertEqual(digest_token_ids([]),
                         "085faab2535c4bff72187825decfc611352ce9dcb9e9e498e68a56b1b32833cc")
        self.assertEqual(digest_token_ids([1, 2, 3]),
                         "e9d12f1bafbdebfe5d809b55a8a807241be14230d9e492883833bf36e0c9c951")
        self.assertEqual(digest_token_ids([-1]),
                         "2838f9f5aa6d9849c8b0c92b8688daae3bdcc1d9e48b180d9fbc9c5ab44490f2")


class InvalidateBodyTest(unittest.TestCase):
    def test_a_span_sends_no_flush(self) -> None:
        kv = _RecordingClient()
        kv.invalidate("llama", "erasure", token_ids=[1, 2, 3], tenant="acme")
        self.assertEqual(kv.calls, [("POST", "/v1/invalidations", {
            "model": "llama", "reason": "erasure", "token_ids": [1, 2, 3], "tenant": "acme"})])

    def test_a_tenant_revocation(self) -> None:
        # docs/formats/governance-api.md: scope "tenant" with tenant; model ""
        # is every model; flush only when asked for.
        kv = _RecordingClient()
        kv.invalidate("", "offboarded", scope="tenant", tenant="acme")
        kv.invalidate("llama", "breach", scope="tenant", tenant="acme", flush=True)
        self.assertEqual([body for _, _, body in kv.calls], [
            {"model": "", "reason": "offboarded", "tenant": "acme", "scope": "tenant"},
            {"model": "llama", "reason": "breach", "tenant": "acme", "scope": "tenant",
             "flush": True},
        ])

    def test_flush_must_be_a_bool(self) -> None:
        # Which scopes take flush is kvgov's to judge (a 400); its type is checked here.
        kv = _RecordingClient()
        with self.assertRaises(TypeError):
            kv.invalidate("", "r", scope="tenant", tenant="acme", flush=1)  # type: ignore[arg-type]
        self.assertEqual(kv.calls, [])
        kv.invalidate("llama", "r", scope="model", flush=True)
        self.assertEqual(kv.calls[0][2]["flush"], True)


class HelpersTest(unittest.TestCase):
    def test_error_bodies(self) -> None:
        error = _error_from(400, '{"error":{"code":"invalid_argument","message":"$.x: bad"}}',
                            "Bad Request")
        self.assertEqual((error.status, error.code, error.message),
                         (400, "invalid_argument", "$.x: bad"))
        self.assertIsInstance(error, KvgovError)
        bare = _error_from(400, "", "Bad Request")
        self.assertEqual((bare.code, bare.message), ("http_400", "Bad Request"))
        proxy = _error_from(502, "<html>bad gateway</html>", "Bad Gateway")
        self.assertEqual(proxy.code, "http_502")
        self.assertIn("bad gateway", proxy.message)

    def test_metrics_parser(self) -> None:
        text = (
            "# HELP kvgov_x_total x\n# TYPE kvgov_x_total counter\n"
            'kvgov_x_total{source="provider",plane="provider"} 3\n'
            'kvgov_x_total{source="native",plane="a\\"b\\\\c"} 4\n'
            "kvgov_y 1.5e3\n"
        )
        self.assertEqual(metric_value(text, "kvgov_x_total"), 7)
        self.assertEqual(metric_value(text, "kvgov_x_total", source="provider"), 3)
        self.assertEqual(metric_value(text, "kvgov_x_total", plane='a"b\\c'), 4)
        self.assertEqual(metric_value(text, "kvgov_x_total", source="nobody"), 0)
        self.assertEqual(metric_value(text, "kvgov_y"), 1500)
        self.assertEqual(len(parse_metrics(text)), 3)


if __name__ == "__main__":
    unittest.main()

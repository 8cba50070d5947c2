"""usage blocks -> provider_cache events, on responses shaped as the providers send them."""

from __future__ import annotations

import json
import unittest

from kvgov_client import (
    provider_cache_from_anthropic_usage,
    provider_cache_from_openai_usage,
    provider_cache_from_response,
)

OPENAI_CHAT = json.loads("""
{"id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG", "object": "chat.completion",
 "created": 1741570283, "model": "gpt-4o-2024-08-06",
 "choices": [{"index": 0, "message": {"role": "assistant", "content": "...", "refusal": null,
              "annotations": []}, "logprobs": null, "finish_reason": "stop"}],
 "usage": {"prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
           "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
           "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                         "accepted_prediction_tokens": 0,
                                         "rejected_prediction_tokens": 0}},
 "service_tier": "default", "system_fingerprint": "fp_fc9f1d7035"}
""")

OPENAI_RESPONSES = json.loads("""
{"id": "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b", "object": "response",
 "created_at": 1741476542, "status": "completed", "model": "gpt-4.1-2025-04-14",
 "output": [], "reasoning": {"effort": null, "summary": null},
 "usage": {"input_tokens": 36, "input_tokens_details": {"cached_tokens": 0},
           "output_tokens": 87, "output_tokens_details": {"reasoning_tokens": 0},
           "total_tokens": 123}}
""")

ANTHROPIC = json.loads("""
{"id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", "role": "assistant",
 "model": "claude-sonnet-4-20250514",
 "content": [{"type": "text", "text": "..."}],
 "stop_reason": "end_turn", "stop_sequence": null,
 "usage": {"input_tokens": 21, "cache_creation_input_tokens": 188086,
           "cache_read_input_tokens": 0,
           "cache_creation": {"ephemeral_5m_input_tokens": 0,
                              "ephemeral_1h_input_tokens": 188086},
           "output_tokens": 393, "service_tier": "standard"}}
""")


class OpenAIUsageTest(unittest.TestCase):
    def test_chat_completions(self) -> None:
        event = provider_cache_from_openai_usage(OPENAI_CHAT["usage"], "gpt-4o-2024-08-06",
                                                 serializer_id="chat-v3", endpoint="chat")
        self.assertEqual(event, {
            "type": "provider_cache", "provider": "openai", "model_id": "gpt-4o-2024-08-06",
            "prompt_tokens": 2006, "cached_tokens": 1920, "breakpoint_mode": "auto",
            "serializer_id": "chat-v3", "endpoint": "chat"})

    def test_responses_api(self) -> None:
        event = provider_cache_from_openai_usage(OPENAI_RESPONSES["usage"], "gpt-4.1")
        self.assertEqual((event["prompt_tokens"], event["cached_tokens"]), (36, 0))
        self.assertNotIn("write_tokens", event)
        self.assertNotIn("retention", event)

    def test_null_details_and_retention_override(self) -> None:
        event = provider_cache_from_openai_usage(
            {"prompt_tokens": 10, "completion_tokens": 1, "prompt_tokens_details": None},
            "gpt-4o", retention="24h", reasoning_mode="high", tool_set_id="t1", region="us")
        self.assertEqual(event["cached_tokens"], 0)
        self.assertEqual(event["retention"], "24h")
        self.assertEqual((event["reasoning_mode"], event["tool_set_id"], event["region"]),
                         ("high", "t1", "us"))

    def test_bad_usage(self) -> None:
        with self.assertRaises(TypeError):
            provider_cache_from_openai_usage({"prompt_tokens": 1.5}, "gpt-4o")
        with self.assertRaises(TypeError):
            provider_cache_from_openai_usage([], "gpt-4o")  # type: ignore[arg-type]
        with self.assertRaises(TypeError):
            provider_cache_from_openai_usage({"prompt_tokens": 1}, "gpt-4o", color="red")


class AnthropicUsageTest(unittest.TestCase):
    def test_cache_write_with_ttl_breakdown(self) -> None:
        event = provider_cache_from_anthropic_usage(ANTHROPIC["usage"], "claude-sonnet-4")
        self.assertEqual(event, {
            "type": "provider_cache", "provider": "anthropic", "model_id": "claude-sonnet-4",
            "prompt_tokens": 21 + 188086, "cached_tokens": 0, "write_tokens": 188086,
            "breakpoint_mode": "explicit", "retention": "1h"})

    def test_cache_read_and_the_longest_written_ttl(self) -> None:
        usage = {"input_tokens": 50, "cache_read_input_tokens": 1000,
                 "cache_creation_input_tokens": 300,
                 "cache_creation": {"ephemeral_5m_input_tokens": 200,
                                    "ephemeral_1h_input_tokens": 100},
                 "output_tokens": 10}
        event = provider_cache_from_anthropic_usage(usage, "claude")
        self.assertEqual((event["prompt_tokens"], event["cached_tokens"], event["write_tokens"]),
                         (1350, 1000, 300))
        self.assertEqual(event["retention"], "1h")
        usage["cache_creation"] = {"ephemeral_5m_input_tokens": 300,
                                   "ephemeral_1h_input_tokens": 0}
        self.assertEqual(provider_cache_from_anthropic_usage(usage, "claude")["retention"], "5m")

    def test_no_breakdown_no_guess(self) -> None:
        usage = {"input_tokens": 5, "cache_read_input_tokens": 7,
                 "cache_creation_input_tokens": 3, "output_tokens": 1}
        event = provider_cache_from_anthropic_usage(usage, "claude")
        self.assertNotIn("retention", event)
        self.assertEqual(event["prompt_tokens"], 15)
        event = provider_cache_from_anthropic_usage(usage, "claude", retention="5m")
        self.assertEqual(event["retention"], "5m")

    def test_reads_only_and_nulls(self) -> None:
        usage = {"input_tokens": 3, "cache_read_input_tokens": 4096,
                 "cache_creation_input_tokens": None, "cache_creation": None}
        event = provider_cache_from_anthropic_usage(usage, "claude")
        self.assertEqual((event["cached_tokens"], event["write_tokens"]), (4096, 0))
        self.assertNotIn("retention", event)

    def test_breakdown_without_total(self) -> None:
        usage = {"input_tokens": 1, "cache_creation": {"ephemeral_5m_input_tokens": 40}}
        event = provider_cache_from_anthropic_usage(usage, "claude")
        self.assertEqual((event["write_tokens"], event["prompt_tokens"]), (40, 41))
        self.assertEqual(event["retention"], "5m")

    def test_bedrock(self) -> None:
        event = provider_cache_from_anthropic_usage(ANTHROPIC["usage"], "anthropic.claude",
                                                    provider="bedrock", region="us-east-1")
        self.assertEqual((event["provider"], event["region"]), ("bedrock", "us-east-1"))


class ResponseTest(unittest.TestCase):
    def test_by_shape(self) -> None:
        self.assertEqual(provider_cache_from_response(OPENAI_CHAT)["provider"], "openai")
        self.assertEqual(provider_cache_from_response(OPENAI_CHAT)["model_id"],
                         "gpt-4o-2024-08-06")
        self.assertEqual(provider_cache_from_response(OPENAI_RESPONSES)["model_id"],
                         "gpt-4.1-2025-04-14")
        anthropic = provider_cache_from_response(ANTHROPIC, model_id="claude-4", endpoint="msg")
        self.assertEqual((anthropic["provider"], anthropic["model_id"], anthropic["endpoint"]),
                         ("anthropic", "claude-4", "msg"))

    def test_missing_parts(self) -> None:
        with self.assertRaises(ValueError):
            provider_cache_from_response({"model": "m"})
        with self.assertRaises(ValueError):
            provider_cache_from_response({"usage": {"prompt_tokens": 1}})


if __name__ == "__main__":
    unittest.main()

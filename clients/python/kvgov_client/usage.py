"""``provider_cache`` events from a hosted model's ``usage`` block.

Hosted providers report their prompt cache in each response's ``usage``.
These helpers turn that block into kvgov's ``ProviderCache`` record
(docs/formats/envelope.md section 4.5), which kvgov lowers as cost and
latency telemetry only: it never makes anything servable.

Mapping
-------

OpenAI, Chat Completions (``usage.prompt_tokens``) or Responses
(``usage.input_tokens``):

==============================================  ====================================
``usage`` field                                 ``provider_cache`` field
==============================================  ====================================
``prompt_tokens`` / ``input_tokens``            ``prompt_tokens``
``prompt_tokens_details.cached_tokens`` /       ``cached_tokens``
``input_tokens_details.cached_tokens``
(not reported: OpenAI caches implicitly)        ``write_tokens`` omitted (0)
(caching is automatic)                          ``breakpoint_mode`` = ``auto``
==============================================  ====================================

Anthropic Messages (also Claude on Bedrock's InvokeModel, ``provider="bedrock"``):

==============================================  ====================================
``usage`` field                                 ``provider_cache`` field
==============================================  ====================================
``cache_read_input_tokens``                     ``cached_tokens``
``cache_creation_input_tokens`` (else the sum   ``write_tokens``
of the ``cache_creation`` breakdown)
``input_tokens`` + ``cache_read_input_tokens``  ``prompt_tokens`` (Anthropic's
+ ``cache_creation_input_tokens``               ``input_tokens`` counts only the
                                                uncached tail)
``cache_creation.ephemeral_<N><m|h>_input_      ``retention`` = ``<N><m|h>`` of the
tokens``                                        longest TTL that wrote tokens
(``cache_control`` breakpoints)                 ``breakpoint_mode`` = ``explicit``
==============================================  ====================================

A missing or ``null`` count is 0. Without a ``cache_creation`` breakdown
(or with no writes) ``retention`` is left out rather than guessed.

The vary axes are request facts the ``usage`` block does not carry, so the
caller passes them: ``serializer_id`` (a stable id of how the prompt was
serialised), ``endpoint``, ``reasoning_mode``, ``tool_set_id``, ``region``.
They, with the provider and ``model_id``, name the cache family kvgov
accounts to, so keep them stable between calls that can share a cache.
An explicit ``retention`` or ``breakpoint_mode`` argument overrides the
derived one (pass ``"24h"`` for OpenAI's ``prompt_cache_retention``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .events import provider_cache

__all__ = [
    "provider_cache_from_anthropic_usage",
    "provider_cache_from_openai_usage",
    "provider_cache_from_response",
]

_TTL_KEY = re.compile(r"^ephemeral_(\d+)(m|h)_input_tokens$")
_UNIT_SECONDS = {"m": 60, "h": 3600}


def _count(block: Mapping[str, Any] | None, key: str) -> int:
    """A token count from a usage block: absent or ``null`` is 0."""
    if not block:
        return 0
    value = block.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"usage.{key}: want int, got {type(value).__name__}")
    return value


def _details(usage: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    details = usage.get(key)
    if details is not None and not isinstance(details, Mapping):
        raise TypeError(f"usage.{key}: want an object, got {type(details).__name__}")
    return details


def provider_cache_from_openai_usage(
    usage: Mapping[str, Any],
    model_id: str,
    *,
    breakpoint_mode: str = "auto",
    retention: str | None = None,
    **axes: Any,
) -> dict[str, Any]:
    """A ``provider_cache`` event from an OpenAI ``usage`` block.

    ``axes`` are the remaining :func:`kvgov_client.events.provider_cache`
    keywords (``serializer_id``, ``endpoint``, ``reasoning_mode``,
    ``tool_set_id``, ``region``, ``first_diverge_at``, ``owner``).
    """
    if not isinstance(usage, Mapping):
        raise TypeError(f"usage: want an object, got {type(usage).__name__}")
    if "prompt_tokens" in usage:  # Chat Completions
        prompt = _count(usage, "prompt_tokens")
        cached = _count(_details(usage, "prompt_tokens_details"), "cached_tokens")
    else:  # Responses
        prompt = _count(usage, "input_tokens")
        cached = _count(_details(usage, "input_tokens_details"), "cached_tokens")
    return provider_cache("openai", model_id, prompt_tokens=prompt, cached_tokens=cached,
                          breakpoint_mode=breakpoint_mode, retention=retention, **axes)


def provider_cache_from_anthropic_usage(
    usage: Mapping[str, Any],
    model_id: str,
    *,
    provider: str = "anthropic",
    breakpoint_mode: str = "explicit",
    retention: str | None = None,
    **axes: Any,
) -> dict[str, Any]:
    """A ``provider_cache`` event from an Anthropic ``usage`` block.

    ``provider`` may be ``"bedrock"`` for Claude's usage through Bedrock's
    InvokeModel, which has the same shape.
    """
    if not isinstance(usage, Mapping):
        raise TypeError(f"usage: want an object, got {type(usage).__name__}")
    read = _count(usage, "cache_read_input_tokens")
    breakdown = _details(usage, "cache_creation") or {}
    ttl_writes = {}
    for key in breakdown:
        if match := _TTL_KEY.match(key):
            ttl_writes[match.group(1) + match.group(2)] = (
                int(match.group(1)) * _UNIT_SECONDS[match.group(2)], _count(breakdown, key))
    if usage.get("cache_creation_input_tokens") is not None:
        written = _count(usage, "cache_creation_input_tokens")
    else:
        written = sum(tokens for _, tokens in ttl_writes.values())
    if retention is None:
        written_ttls = [(seconds, name) for name, (seconds, tokens) in ttl_writes.items()
                        if tokens > 0]
        retention = max(written_ttls)[1] if written_ttls else None
    prompt = _count(usage, "input_tokens") + read + written
    return provider_cache(provider, model_id, prompt_tokens=prompt, cached_tokens=read,
                          write_tokens=written, breakpoint_mode=breakpoint_mode,
                          retention=retention, **axes)


def provider_cache_from_response(response: Mapping[str, Any], **axes: Any) -> dict[str, Any]:
    """A ``provider_cache`` event from a whole response object (parsed JSON).

    Tells the provider by shape: Anthropic's ``"type": "message"``, else
    OpenAI (``chat.completion`` or ``response``). ``model_id`` is the
    response's ``model`` unless given in ``axes``.
    """
    if not isinstance(response, Mapping):
        raise TypeError(f"response: want an object, got {type(response).__name__}")
    usage = response.get("usage")
    if not isinstance(usage, Mapping):
        raise ValueError("response: has no usage block")
    model_id = axes.pop("model_id", None) or response.get("model")
    if not isinstance(model_id, str) or not model_id:
        raise ValueError("response: has no model; pass model_id")
    if response.get("type") == "message":
        return provider_cache_from_anthropic_usage(usage, model_id, **axes)
    return provider_cache_from_openai_usage(usage, model_id, **axes)

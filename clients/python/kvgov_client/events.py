"""Builders for the reports ``POST /v1/events`` accepts.

Each builder returns a plain ``dict``: one element of the ``events`` array,
with its ``"type"`` and the record's fields flat beside it, exactly as
docs/formats/envelope.md (section 4) and docs/formats/events-api.md spell
them. A field left at ``None`` is omitted, so kvgov applies its documented
default; kvgov never accepts ``null``.

Only types are checked here (an ``int64`` must be an ``int``, never a
``bool`` or a ``float``, since kvgov rejects ``2.0``). Vocabularies, ranges
and the lowering rules are kvgov's to judge: a bad element comes back in
``EmitResult.rejected`` with its path, and never rejects its neighbours.
The vocabularies are exported below for callers that want to check early.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# Enum spellings from docs/formats/envelope.md section 5.
KV_TRANSFER_DIRECTIONS = ("offload", "restore", "route", "migrate", "store", "evict")
KV_TRANSFER_OUTCOMES = ("ok", "missed", "fault")
RESIDENCY_TIERS = ("", "hbm", "dram", "numa_far", "cxl", "disk", "remote", "provider", "recompute")
POSITION_MODES = ("", "prefix_aligned", "relocatable", "recompute_required")
NIXL_LEASE_EVENTS = ("create", "heartbeat", "transfer_complete", "expiry", "abort")
NIXL_ROLES = ("prefill_pin", "decode_pull", "push_write")
PROVIDERS = ("openai", "anthropic", "gemini", "bedrock")
BREAKPOINT_MODES = ("", "auto", "explicit", "implicit")
TOOL_RESULT_EVENTS = ("fill", "hit", "evict", "revoke", "miss")
LMCACHE_OPERATIONS = ("offload", "restore", "evict")

_INT64 = (-(2**63), 2**63 - 1)
_UINT64 = (0, 2**64 - 1)


def _check_str(name: str, value: Any) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{name}: want str, got {type(value).__name__}")


def _check_int(name: str, value: Any, bounds: tuple[int, int] = _INT64) -> None:
    # bool is an int subclass, and kvgov's integers are never booleans.
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: want int, got {type(value).__name__}")
    if not bounds[0] <= value <= bounds[1]:
        raise ValueError(f"{name}: {value} is outside [{bounds[0]}, {bounds[1]}]")


def _check_ints(name: str, values: Any, bounds: tuple[int, int] = _INT64) -> list[int]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"{name}: want a sequence of int, got {type(values).__name__}")
    out = list(values)
    for i, value in enumerate(out):
        _check_int(f"{name}[{i}]", value, bounds)
    return out


def _put(event: dict[str, Any], name: str, value: Any, kind: str) -> None:
    """Sets ``event[name]`` after a type check; ``None`` leaves it absent."""
    if value is None:
        return
    if kind == "str":
        _check_str(name, value)
    elif kind == "int":
        _check_int(name, value)
    elif kind == "uint":
        _check_int(name, value, _UINT64)
    elif kind == "ints":
        value = _check_ints(name, value)
    elif kind == "uints":
        value = _check_ints(name, value, _UINT64)
    elif kind == "object":
        if not isinstance(value, Mapping):
            raise TypeError(f"{name}: want a mapping, got {type(value).__name__}")
        value = dict(value)
    event[name] = value


def _residency(
    event: dict[str, Any],
    *,
    worker: str | None = None,
    from_worker: str | None = None,
    token_ids: Sequence[int] | None = None,
    block_hashes: Sequence[int] | None = None,
    lora_name: str | None = None,
    cache_salt: str | None = None,
    group_idx: int | None = None,
) -> dict[str, Any]:
    _put(event, "worker", worker, "str")
    _put(event, "from_worker", from_worker, "str")
    _put(event, "token_ids", token_ids, "ints")
    _put(event, "block_hashes", block_hashes, "uints")
    _put(event, "lora_name", lora_name, "str")
    _put(event, "cache_salt", cache_salt, "str")
    _put(event, "group_idx", group_idx, "int")
    return event


def kv_transfer(
    direction: str,
    span_digest: str,
    *,
    tokens: int | None = None,
    model_id: str | None = None,
    tokenizer_id: str | None = None,
    serializer_id: str | None = None,
    position_mode: str | None = None,
    from_tier: str | None = None,
    to_tier: str | None = None,
    owner: str | None = None,
    lease: str | None = None,
    outcome: str | None = None,
    fault_reason: str | None = None,
    bytes_moved: int | None = None,
    deletion_certificate: Mapping[str, str] | None = None,
    worker: str | None = None,
    from_worker: str | None = None,
    token_ids: Sequence[int] | None = None,
    block_hashes: Sequence[int] | None = None,
    lora_name: str | None = None,
    cache_salt: str | None = None,
    group_idx: int | None = None,
) -> dict[str, Any]:
    """A ``kv_transfer`` event: one KV span movement (envelope.md 4.3).

    The residency fields (``worker`` ... ``group_idx``, events-api.md) say
    where the span lives afterwards. With ``outcome`` ``ok`` (the default),
    ``store``, ``offload``, ``restore`` and ``migrate`` place the span in
    ``to_tier`` on ``worker``; ``evict`` removes it from ``from_tier``;
    ``route`` moves nothing. They move residency only when kvgov admits
    ``owner`` (``serve --admit OWNER``); otherwise the element is rejected
    with ``owner: ... is not admitted``. ``token_ids`` are the span's tokens
    from the start of the prompt: every full block of them is placed or
    removed, not only the last one.
    """
    _check_str("direction", direction)
    _check_str("span_digest", span_digest)
    event: dict[str, Any] = {"type": "kv_transfer", "direction": direction,
                             "span_digest": span_digest}
    _put(event, "tokens", tokens, "int")
    _put(event, "model_id", model_id, "str")
    _put(event, "tokenizer_id", tokenizer_id, "str")
    _put(event, "serializer_id", serializer_id, "str")
    _put(event, "position_mode", position_mode, "str")
    _put(event, "from_tier", from_tier, "str")
    _put(event, "to_tier", to_tier, "str")
    _put(event, "owner", owner, "str")
    _put(event, "lease", lease, "str")
    _put(event, "outcome", outcome, "str")
    _put(event, "fault_reason", fault_reason, "str")
    _put(event, "bytes_moved", bytes_moved, "int")
    _put(event, "deletion_certificate", deletion_certificate, "object")
    return _residency(event, worker=worker, from_worker=from_worker, token_ids=token_ids,
                      block_hashes=block_hashes, lora_name=lora_name, cache_salt=cache_salt,
                      group_idx=group_idx)


def nixl_lease(
    lease_id: str,
    event: str,
    role: str,
    *,
    trace_id: str | None = None,
    request_id: str | None = None,
    remote_engine: str | None = None,
    span_digest: str | None = None,
    tokens: int | None = None,
    model_id: str | None = None,
    tokenizer_id: str | None = None,
    granted_at_ms: int | None = None,
    expires_at_ms: int | None = None,
    ttl_ms: int | None = None,
    bytes_moved: int | None = None,
    worker: str | None = None,
    token_ids: Sequence[int] | None = None,
    cache_salt: str | None = None,
    lora_name: str | None = None,
    group_idx: int | None = None,
) -> dict[str, Any]:
    """A ``nixl_lease`` event (envelope.md 4.4, governance-api.md).

    ``create`` grants the lease at kvgov's clock (kvgov sets the grant and
    the expiry itself, from ``ttl_ms``), ``heartbeat`` pushes the expiry,
    ``transfer_complete`` / ``abort`` / ``expiry`` end it. Give a non-empty
    ``span_digest``: a lease without one is ``unidentified`` and never warm,
    even when ``token_ids`` name its blocks. ``worker`` defaults to
    ``remote_engine`` on kvgov's side.
    """
    _check_str("lease_id", lease_id)
    _check_str("event", event)
    _check_str("role", role)
    out: dict[str, Any] = {"type": "nixl_lease", "lease_id": lease_id, "event": event,
                           "role": role}
    _put(out, "trace_id", trace_id, "str")
    _put(out, "request_id", request_id, "str")
    _put(out, "remote_engine", remote_engine, "str")
    _put(out, "span_digest", span_digest, "str")
    _put(out, "tokens", tokens, "int")
    _put(out, "model_id", model_id, "str")
    _put(out, "tokenizer_id", tokenizer_id, "str")
    _put(out, "granted_at_ms", granted_at_ms, "int")
    _put(out, "expires_at_ms", expires_at_ms, "int")
    _put(out, "ttl_ms", ttl_ms, "int")
    _put(out, "bytes_moved", bytes_moved, "int")
    return _residency(out, worker=worker, token_ids=token_ids, cache_salt=cache_salt,
                      lora_name=lora_name, group_idx=group_idx)


def provider_cache(
    provider: str,
    model_id: str,
    *,
    cached_tokens: int | None = None,
    write_tokens: int | None = None,
    prompt_tokens: int | None = None,
    serializer_id: str | None = None,
    breakpoint_mode: str | None = None,
    retention: str | None = None,
    first_diverge_at: int | None = None,
    owner: str | None = None,
    endpoint: str | None = None,
    reasoning_mode: str | None = None,
    tool_set_id: str | None = None,
    region: str | None = None,
) -> dict[str, Any]:
    """A ``provider_cache`` event: hosted prompt-cache telemetry (envelope.md 4.5).

    Cost and latency information only, never a servable handle. The cache
    family is the digest of ``provider``, ``model_id`` and the vary axes
    ``serializer_id``, ``endpoint``, ``reasoning_mode``, ``tool_set_id`` and
    ``region``. ``retention`` is ``<count><s|m|min|h>`` (``5m``, ``1h``).
    See :mod:`kvgov_client.usage` to build one from a response's ``usage``.
    """
    _check_str("provider", provider)
    _check_str("model_id", model_id)
    event: dict[str, Any] = {"type": "provider_cache", "provider": provider,
                             "model_id": model_id}
    _put(event, "cached_tokens", cached_tokens, "int")
    _put(event, "write_tokens", write_tokens, "int")
    _put(event, "prompt_tokens", prompt_tokens, "int")
    _put(event, "serializer_id", serializer_id, "str")
    _put(event, "breakpoint_mode", breakpoint_mode, "str")
    _put(event, "retention", retention, "str")
    _put(event, "first_diverge_at", first_diverge_at, "int")
    _put(event, "owner", owner, "str")
    _put(event, "endpoint", endpoint, "str")
    _put(event, "reasoning_mode", reasoning_mode, "str")
    _put(event, "tool_set_id", tool_set_id, "str")
    _put(event, "region", region, "str")
    return event


def tool_result_key(tool: str, args_digest: str, epoch: str | int) -> str:
    """The ``tool:args_digest:epoch`` key of a tool result; no part may be empty."""
    parts = (tool, args_digest, str(epoch))
    for name, part in zip(("tool", "args_digest", "epoch"), parts):
        _check_str(name, part)
        if not part or ":" in part:
            raise ValueError(f"{name}: want a non-empty part without ':', got {part!r}")
    return ":".join(parts)


def tool_result(
    key: str,
    event: str,
    *,
    result_digest: str | None = None,
    size_bytes: int | None = None,
    witness: str | None = None,
    saved_tokens: int | None = None,
) -> dict[str, Any]:
    """A ``tool_result`` event (envelope.md 4.7).

    ``key`` is ``tool:args_digest:epoch`` (see :func:`tool_result_key`);
    ``result_digest`` is required for every event but ``miss``.
    """
    _check_str("key", key)
    _check_str("event", event)
    out: dict[str, Any] = {"type": "tool_result", "key": key, "event": event}
    _put(out, "result_digest", result_digest, "str")
    _put(out, "size_bytes", size_bytes, "int")
    _put(out, "witness", witness, "str")
    _put(out, "saved_tokens", saved_tokens, "int")
    return out


def digest_token_ids(token_ids: Sequence[int]) -> str:
    """kvgov's ``DigestTokenIds`` (envelope.md section 6), lowercase hex SHA-256.

    A stable span digest for a token prefix, framed as kvgov frames it:
    ``frame("kvgov.token_ids.v1") || u64be(count) || i64be(id)...``.
    """
    ids = _check_ints("token_ids", token_ids)
    domain = b"kvgov.token_ids.v1"
    h = hashlib.sha256()
    h.update(struct.pack(">Q", len(domain)) + domain)
    h.update(struct.pack(">Q", len(ids)))
    for token in ids:
        h.update(struct.pack(">q", token))
    return h.hexdigest()

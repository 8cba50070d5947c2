"""kvgov_client: a standard-library-only Python client for kvgov.

kvgov is a governance plane for KV caches in LLM serving (see the
repository's README.md). This package speaks its HTTP API:

- :class:`Client`: events, routing, quarantine, invalidations, certificates
  and the read endpoints; errors raise :class:`KvgovError`.
- :mod:`kvgov_client.events`: builders for the reports ``POST /v1/events``
  accepts (``kv_transfer``, ``nixl_lease``, ``provider_cache``,
  ``tool_result``).
- :mod:`kvgov_client.usage`: ``provider_cache`` events from an OpenAI or
  Anthropic response's ``usage`` block.
- :mod:`kvgov_client.lmcache`: a buffered, never-raising reporter for an
  LMCache-like offload backend.
- :func:`verify_certificate_with_cli`: ``kvgov cert verify`` on a
  certificate.
"""

from .client import (
    Certificate,
    Client,
    EmitResult,
    KvgovError,
    Rejection,
    RouteDecision,
    Verdict,
    journal_row_hash,
    metric_value,
    parse_metrics,
    verify_certificate_with_cli,
)
from .events import (
    digest_token_ids,
    kv_transfer,
    nixl_lease,
    provider_cache,
    tool_result,
    tool_result_key,
)
from .lmcache import BACKEND_TIERS, BufferedEmitter, EmitterStats, LMCacheReporter
from .usage import (
    provider_cache_from_anthropic_usage,
    provider_cache_from_openai_usage,
    provider_cache_from_response,
)

__all__ = [
    "BACKEND_TIERS",
    "BufferedEmitter",
    "Certificate",
    "Client",
    "EmitResult",
    "EmitterStats",
    "KvgovError",
    "LMCacheReporter",
    "Rejection",
    "RouteDecision",
    "Verdict",
    "digest_token_ids",
    "journal_row_hash",
    "kv_transfer",
    "metric_value",
    "nixl_lease",
    "parse_metrics",
    "provider_cache",
    "provider_cache_from_anthropic_usage",
    "provider_cache_from_openai_usage",
    "provider_cache_from_response",
    "tool_result",
    "tool_result_key",
    "verify_certificate_with_cli",
]

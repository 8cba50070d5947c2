#pragma once

// Internal to kvgov_codec: the wire schema of every record, one Fields()
// each; the order of calls is the order fields are checked in.
// docs/formats/envelope.md is the prose form of this file and must change
// with it.

#include <string>

#include "codec/json_fields.h"

namespace kvgov::codec_internal {

template <>
struct Schema<EntryId> {
  static void Fields(auto& v, auto& id) {
    v.Required("digest", id.digest);
    v.Optional("media_type", id.media_type);
    v.Optional("length", id.length);
    // Every id, not just an entry's own: a negative length never names an
    // object (EntryId::Valid), wherever the id appears.
    v.Expect("length", id.length >= 0,
             [&] { return "must be >= 0, got " + std::to_string(id.length); });
    v.Optional("unit", id.unit);
  }
};

template <>
struct Schema<Derivation> {
  static void Fields(auto& v, auto& d) {
    v.Optional("producer", d.producer);
    v.Optional("tool", d.tool);
    v.Optional("args_digest", d.args_digest);
    v.Optional("model_id", d.model_id);
    v.Optional("tokenizer_id", d.tokenizer_id);
    v.Optional("serializer_id", d.serializer_id);
    v.Optional("position_mode", d.position_mode);
    v.Optional("source_refs", d.source_refs);
  }
};

template <>
struct Schema<Validity> {
  static void Fields(auto& v, auto& val) {
    v.Optional("witness", val.witness);
    v.Optional("admitted_at_epoch", val.admitted_at_epoch);
    v.Optional("trust_epoch", val.trust_epoch);
    v.Optional("ttl_millis", val.ttl_millis);
    v.Optional("policy_version", val.policy_version);
  }
};

template <>
struct Schema<DeletionCertificateRef> {
  static void Fields(auto& v, auto& cert) {
    v.Optional("schema", cert.schema);
    v.Optional("subject", cert.subject);
    v.Optional("digest", cert.digest);
  }
};

template <>
struct Schema<Security> {
  static void Fields(auto& v, auto& s) {
    v.Optional("taint", s.taint);
    v.Optional("scope", s.scope);
    v.Optional("admission_verdict", s.admission_verdict);
    v.Optional("admitted_by", s.admitted_by);
    v.Optional("reason", s.reason);
    v.Optional("deletion_certificate", s.deletion_certificate);
  }
};

template <>
struct Schema<Residency> {
  static void Fields(auto& v, auto& r) {
    v.Optional("tier", r.tier);
    v.Optional("owner", r.owner);
    v.Optional("lease", r.lease);
  }
};

template <>
struct Schema<Consumer> {
  static void Fields(auto& v, auto& c) {
    v.Optional("kind", c.kind);
    v.Optional("id", c.id);
    v.Optional("agent_id", c.agent_id);
    v.Optional("trace_id", c.trace_id);
  }
};

template <>
struct Schema<Coherence> {
  static void Fields(auto& v, auto& c) {
    v.Optional("consumers", c.consumers);
    v.Optional("parents", c.parents);
    v.Optional("invalidation_mode", c.invalidation_mode);
  }
};

template <>
struct Schema<EntryMetrics> {
  static void Fields(auto& v, auto& m) {
    v.Optional("hits", m.hits);
    v.Optional("misses", m.misses);
    v.Optional("fills", m.fills);
    v.Optional("evictions", m.evictions);
    v.Optional("false_hit_faults", m.false_hit_faults);
    v.Optional("prefill_tokens_saved", m.prefill_tokens_saved);
    v.Optional("bytes_transferred", m.bytes_transferred);
    v.Optional("quality_delta_probe", m.quality_delta_probe);
    v.Optional("coverage", m.coverage);
    v.Optional("faithfulness_probe", m.faithfulness_probe);
  }
};

template <>
struct Schema<Entry> {
  static void Fields(auto& v, auto& e) {
    // A local, so the encoder writes the constant and the decoder checks it.
    int64_t version = kEnvelopeFormatVersion;
    v.Optional("format_version", version);
    v.Expect("format_version", version == kEnvelopeFormatVersion, [&] {
      return "unsupported version " + std::to_string(version) + " (want " +
             std::to_string(kEnvelopeFormatVersion) + ")";
    });
    v.Required("id", e.id);
    v.Required("plane", e.plane);
    // ValidateEntry, below, rejects a source that disagrees with the plane.
    v.Optional("source", e.source, SourceForPlane(e.plane));
    v.Optional("derivation", e.derivation);
    v.Optional("validity", e.validity);
    v.Optional("security", e.security);
    v.Optional("residency", e.residency);
    v.Optional("coherence", e.coherence);
    v.Optional("metrics", e.metrics);
    v.Optional("labels", e.labels);
    v.Validate([&] { return ValidateEntry(e); });
  }
};

template <>
struct Schema<LookupVerdict> {
  static void Fields(auto& v, auto& verdict) {
    v.Required("kind", verdict.kind);
    v.Optional("reason", verdict.reason);
    v.Optional("entry", verdict.entry);
    v.Optional("handle", verdict.handle);
    v.Optional("meta", verdict.meta);
  }
};

// Not a record on its own: its fields sit flat beside the direction or
// operation of the three span records below.
template <>
struct Schema<KVSpanReport> {
  static void Fields(auto& v, auto& s) {
    v.Required("span_digest", s.span_digest);
    v.Optional("tokens", s.tokens);
    v.Optional("model_id", s.model_id);
    v.Optional("tokenizer_id", s.tokenizer_id);
    v.Optional("serializer_id", s.serializer_id);
    v.Optional("position_mode", s.position_mode);
    v.Optional("from_tier", s.from_tier);
    v.Optional("to_tier", s.to_tier);
    v.Optional("owner", s.owner);
    v.Optional("lease", s.lease);
    v.Optional("outcome", s.outcome);
    v.Optional("fault_reason", s.fault_reason);
    v.Optional("bytes_moved", s.bytes_moved);
    v.Optional("deletion_certificate", s.deletion_certificate);
  }
};

template <>
struct Schema<KVTransfer> {
  static void Fields(auto& v, auto& t) {
    v.Required("direction", t.direction);
    Schema<KVSpanReport>::Fields(v, t.span);
  }
};

template <>
struct Schema<MooncakeEvent> {
  static void Fields(auto& v, auto& ev) {
    v.Required("operation", ev.operation);
    Schema<KVSpanReport>::Fields(v, ev.span);
  }
};

template <>
struct Schema<LMCacheEvent> {
  static void Fields(auto& v, auto& ev) {
    v.Required("operation", ev.operation);
    Schema<KVSpanReport>::Fields(v, ev.span);
  }
};

template <>
struct Schema<NIXLLease> {
  static void Fields(auto& v, auto& l) {
    v.Required("lease_id", l.lease_id);
    v.Required("event", l.event);
    v.Required("role", l.role);
    v.Optional("trace_id", l.trace_id);
    v.Optional("request_id", l.request_id);
    v.Optional("remote_engine", l.remote_engine);
    v.Optional("span_digest", l.span_digest);
    v.Optional("tokens", l.tokens);
    v.Optional("model_id", l.model_id);
    v.Optional("tokenizer_id", l.tokenizer_id);
    v.Optional("granted_at_ms", l.granted_at_ms);
    v.Optional("expires_at_ms", l.expires_at_ms);
    v.Optional("ttl_ms", l.ttl_ms);
    v.Optional("bytes_moved", l.bytes_moved);
    v.Optional("witness", l.witness);
  }
};

template <>
struct Schema<ProviderCache> {
  static void Fields(auto& v, auto& c) {
    v.Required("provider", c.provider);
    v.Required("model_id", c.model_id);
    v.Optional("cached_tokens", c.cached_tokens);
    v.Optional("write_tokens", c.write_tokens);
    v.Optional("prompt_tokens", c.prompt_tokens);
    v.Optional("serializer_id", c.serializer_id);
    v.Optional("breakpoint_mode", c.breakpoint_mode);
    v.Optional("retention", c.retention);
    v.Optional("first_diverge_at", c.first_diverge_at);
    v.Optional("owner", c.owner);
    v.Optional("endpoint", c.endpoint);
    v.Optional("reasoning_mode", c.reasoning_mode);
    v.Optional("tool_set_id", c.tool_set_id);
    v.Optional("region", c.region);
  }
};

template <>
struct Schema<KVPrefix> {
  static void Fields(auto& v, auto& p) {
    v.Required("token_ids", p.token_ids);
    v.Required("model_id", p.model_id);
    v.Optional("tokenizer_id", p.tokenizer_id);
    v.Optional("tier", p.tier);
    v.Optional("owner", p.owner);
    v.Optional("lease", p.lease);
    v.Optional("reused_tokens", p.reused_tokens);
  }
};

template <>
struct Schema<ToolResult> {
  static void Fields(auto& v, auto& r) {
    v.Required("key", r.key);
    v.Required("event", r.event);
    v.Optional("result_digest", r.result_digest);
    v.Optional("size_bytes", r.size_bytes);
    v.Optional("witness", r.witness);
    v.Optional("saved_tokens", r.saved_tokens);
  }
};

}  // namespace kvgov::codec_internal

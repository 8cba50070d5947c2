#include "kvgov/client/event.h"

#include <charconv>
#include <string_view>
#include <type_traits>

#include "kvgov/core/enum_spelling.h"
#include "kvgov/core/json_string.h"
#include "kvgov/core/vocabulary.h"

namespace kvgov::client {
namespace {

// Writes the members of one flat JSON object. The first error sticks and
// later writes are skipped, so the encoders read straight through and check
// once at the end.
class ObjectWriter {
 public:
  explicit ObjectWriter(std::string& out) : out_(out) { out_.push_back('{'); }

  void String(std::string_view key, std::string_view value) {
    if (!Key(key)) return;
    if (!IsValidUtf8(value)) {
      Fail(key, "not valid UTF-8");
      return;
    }
    AppendJsonString(out_, value);
  }
  void OptionalString(std::string_view key, std::string_view value) {
    if (!value.empty()) String(key, value);
  }

  template <typename Int>
  void Integer(std::string_view key, Int value) {
    static_assert(std::is_integral_v<Int>);
    if (!Key(key)) return;
    char digits[24];
    const auto [end, ec] = std::to_chars(digits, digits + sizeof(digits), value);
    out_.append(digits, end);
  }
  void OptionalInteger(std::string_view key, int64_t value) {
    if (value != 0) Integer(key, value);
  }

  template <typename E>
  void Enum(std::string_view key, E value) {
    // ToString answers "<invalid>" for a value outside the table: a cast
    // from a bad integer. kvgov would reject it, but only after it had
    // crossed the wire looking like a spelling.
    const std::string_view spelling = ToString(value);
    if (spelling == "<invalid>") {
      Fail(key, "value " + std::to_string(static_cast<int64_t>(value)) + " is not a " +
                    std::string(EnumSpelling<E>::kName));
      return;
    }
    String(key, spelling);
  }
  template <typename E>
  void OptionalEnum(std::string_view key, E value, E default_value) {
    if (value != default_value) Enum(key, value);
  }

  template <typename Int>
  void IntegerArray(std::string_view key, const std::vector<Int>& values) {
    if (values.empty()) return;
    if (values.size() > kMaxSpanItems) {
      Fail(key, std::to_string(values.size()) + " items, over kvgov's limit of " +
                    std::to_string(kMaxSpanItems));
      return;
    }
    if (!Key(key)) return;
    out_.push_back('[');
    char digits[24];
    for (size_t i = 0; i < values.size(); ++i) {
      if (i > 0) out_.push_back(',');
      const auto [end, ec] = std::to_chars(digits, digits + sizeof(digits), values[i]);
      out_.append(digits, end);
    }
    out_.push_back(']');
  }

  // A nested object: `fill` writes its members through the writer it gets.
  template <typename Fill>
  void Object(std::string_view key, Fill&& fill) {
    if (!Key(key)) return;
    ObjectWriter nested(out_);
    fill(nested);
    if (!nested.status_.ok()) status_ = nested.status_.WithContext(key);
    nested.Close();
  }

  void Close() { out_.push_back('}'); }
  const Status& status() const { return status_; }

 private:
  // Writes `"key":` (with the separating comma); false once an error stuck.
  bool Key(std::string_view key) {
    if (!status_.ok()) return false;
    if (!first_) out_.push_back(',');
    first_ = false;
    AppendJsonString(out_, key);
    out_.push_back(':');
    return true;
  }
  void Fail(std::string_view key, const std::string& problem) {
    if (status_.ok()) status_ = Status::InvalidArgument(std::string(key) + ": " + problem);
  }

  std::string& out_;
  bool first_ = true;
  Status status_;
};

void WriteSpan(ObjectWriter& w, const KVSpanReport& span) {
  // Required: written even when empty, so kvgov names the problem.
  w.String("span_digest", span.span_digest);
  w.OptionalInteger("tokens", span.tokens);
  w.OptionalString("model_id", span.model_id);
  w.OptionalString("tokenizer_id", span.tokenizer_id);
  w.OptionalString("serializer_id", span.serializer_id);
  w.OptionalEnum("position_mode", span.position_mode, PositionMode::kUnknown);
  w.OptionalEnum("from_tier", span.from_tier, ResidencyTier::kUnknown);
  w.OptionalEnum("to_tier", span.to_tier, ResidencyTier::kUnknown);
  w.OptionalString("owner", span.owner);
  w.OptionalString("lease", span.lease);
  w.OptionalEnum("outcome", span.outcome, KVTransferOutcome::kOk);
  w.OptionalString("fault_reason", span.fault_reason);
  w.OptionalInteger("bytes_moved", span.bytes_moved);
  if (span.deletion_certificate != DeletionCertificateRef{}) {
    w.Object("deletion_certificate", [&](ObjectWriter& cert) {
      cert.OptionalString("schema", span.deletion_certificate.schema);
      cert.OptionalString("subject", span.deletion_certificate.subject);
      cert.OptionalString("digest", span.deletion_certificate.digest);
    });
  }
}

void WriteTransfer(ObjectWriter& w, const KVTransfer& transfer) {
  w.String("type", "kv_transfer");
  w.Enum("direction", transfer.direction);
  WriteSpan(w, transfer.span);
}

void WriteLease(ObjectWriter& w, const NIXLLease& lease) {
  w.String("type", "nixl_lease");
  w.String("lease_id", lease.lease_id);
  w.Enum("event", lease.event);
  w.Enum("role", lease.role);
  w.OptionalString("trace_id", lease.trace_id);
  w.OptionalString("request_id", lease.request_id);
  w.OptionalString("remote_engine", lease.remote_engine);
  w.OptionalString("span_digest", lease.span_digest);
  w.OptionalInteger("tokens", lease.tokens);
  w.OptionalString("model_id", lease.model_id);
  w.OptionalString("tokenizer_id", lease.tokenizer_id);
  w.OptionalInteger("granted_at_ms", lease.granted_at_ms);
  w.OptionalInteger("expires_at_ms", lease.expires_at_ms);
  w.OptionalInteger("ttl_ms", lease.ttl_ms);
  w.OptionalInteger("bytes_moved", lease.bytes_moved);
}

void WriteLocation(ObjectWriter& w, const SpanLocation& location) {
  w.OptionalString("worker", location.worker);
  w.OptionalString("from_worker", location.from_worker);
  w.IntegerArray("token_ids", location.token_ids);
  w.IntegerArray("block_hashes", location.block_hashes);
  w.OptionalString("lora_name", location.lora_name);
  w.OptionalString("cache_salt", location.cache_salt);
  w.OptionalInteger("group_idx", location.group_idx);
}

}  // namespace

Result<std::string> EncodeEvent(const Event& event) {
  std::string out;
  out.reserve(256 + (event.location ? 21 * (event.location->token_ids.size() +
                                            event.location->block_hashes.size())
                                    : 0));
  ObjectWriter writer(out);
  std::visit(
      [&](const auto& record) {
        if constexpr (std::is_same_v<std::decay_t<decltype(record)>, KVTransfer>) {
          WriteTransfer(writer, record);
        } else {
          WriteLease(writer, record);
        }
      },
      event.record);
  if (event.location) WriteLocation(writer, *event.location);
  writer.Close();
  if (!writer.status().ok()) return writer.status();
  return out;
}

}  // namespace kvgov::client

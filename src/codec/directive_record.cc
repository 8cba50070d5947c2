#include "kvgov/codec/directive_record.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "codec/json_fields.h"

namespace kvgov {
namespace {

using Json = nlohmann::json;
using governance::Directive;
using governance::OwnerProgress;
using governance::Revocation;

// A field whose value is outside its vocabulary; caught at the decoder's edge.
struct RecordError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// `full` adds what only the store and the log need: the targets still
// pending and the stream seq each owner was dispatched at.
Json OwnerJson(const OwnerProgress& owner, bool full) {
  Json json = {{"worker", owner.worker},
               {"connector", owner.connector},
               {"scope", owner.scope ? ToString(*owner.scope) : ""},
               {"degraded", owner.degraded},
               {"degrade_reason", owner.degrade_reason},
               {"attempts", owner.attempts},
               {"last_status", owner.last_status},
               {"last_error", owner.last_error},
               {"state", ToString(owner.state)},
               {"targets", owner.target_count},
               {"pending", owner.pending.size()},
               {"whole_worker", owner.whole_worker},
               {"witness_kind", owner.witness_kind ? ToString(*owner.witness_kind) : ""},
               {"witness_seqs", owner.witness_seqs},
               {"residue", owner.residue},
               {"unattributed", owner.unattributed}};
  if (full) {
    json["pending_keys"] = owner.pending;
    json["dispatch_seq"] = owner.dispatch_seq;
  }
  return json;
}

Json RevocationJson(const Revocation& r) {
  return {{"all_models_epoch", r.all_models_epoch},
          {"model_epoch", r.model_epoch},
          {"unreachable_since_ms", r.unreachable_since_ms},
          {"flush", r.flush},
          {"removed_by_ms", r.removed_by_ms}};
}

Json ToJson(const Directive& d, bool full) {
  Json owners = Json::array();
  for (const OwnerProgress& owner : d.owners) owners.push_back(OwnerJson(owner, full));
  Json json = {{"id", d.id},
               {"state", ToString(d.state)},
               {"failure", d.failure},
               {"reason", d.reason},
               {"model", d.model},
               {"tenant", d.tenant},
               {"subject", d.subject},
               {"scope", ToString(d.scope)},
               {"targets", d.target_count},
               {"owners", owners},
               {"certificate_id", d.certificate_id},
               {"created_ms", d.created_ms}};
  if (d.revocation) json["revocation"] = RevocationJson(*d.revocation);
  if (full) json["deadline_ms"] = d.deadline_ms;
  return json;
}

// A closed vocabulary's field; `optional` fields read "" as absent.
template <typename E>
E EnumField(const Json& json, const char* field, const std::string& path) {
  Result<E> value = ParseEnum<E>(json.at(field).get<std::string>());
  if (!value.ok()) throw RecordError(path + field + ": " + value.status().message());
  return *value;
}

template <typename E>
std::optional<E> OptionalEnumField(const Json& json, const char* field, const std::string& path) {
  const std::string text = json.value(field, "");
  if (text.empty()) return std::nullopt;
  Result<E> value = ParseEnum<E>(text);
  if (!value.ok()) throw RecordError(path + field + ": " + value.status().message());
  return *value;
}

// The fields of tenant revocations are read strictly: json.value() would
// take -1 for a uint64_t as 2^64-1, and a record kvgov wrote never holds one.
std::string Got(const Json& value) {
  return value.is_number() ? value.dump().substr(0, 32) : std::string(value.type_name());
}

uint64_t UnsignedValue(const Json& value, const std::string& where) {
  if (!value.is_number_unsigned()) {
    throw RecordError(where + ": want an integer in [0, 2^64-1], got " + Got(value));
  }
  return value.get<uint64_t>();
}

int64_t MillisValue(const Json& value, const std::string& where) {
  if (!value.is_number_unsigned() ||
      value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    throw RecordError(where + ": want milliseconds in [0, 2^63-1], got " + Got(value));
  }
  return static_cast<int64_t>(value.get<uint64_t>());
}

bool BoolValue(const Json& value, const std::string& where) {
  if (!value.is_boolean()) throw RecordError(where + ": want true or false, got " + Got(value));
  return value.get<bool>();
}

// A member every revocation record has.
const Json& Member(const Json& json, const char* field, const std::string& path) {
  auto it = json.find(field);
  if (it == json.end()) throw RecordError(path + field + ": missing");
  return *it;
}

// An owner's count that records written before revocations lack: 0.
uint64_t OptionalCount(const Json& json, const char* field, const std::string& path) {
  auto it = json.find(field);
  return it == json.end() ? 0 : UnsignedValue(*it, path + field);
}

Revocation RevocationFromJson(const Json& json) {
  const std::string path = "revocation.";
  if (!json.is_object()) throw RecordError("revocation: want an object, got " + Got(json));
  Revocation r;
  r.all_models_epoch =
      UnsignedValue(Member(json, "all_models_epoch", path), path + "all_models_epoch");
  r.model_epoch = UnsignedValue(Member(json, "model_epoch", path), path + "model_epoch");
  r.unreachable_since_ms =
      MillisValue(Member(json, "unreachable_since_ms", path), path + "unreachable_since_ms");
  r.flush = BoolValue(Member(json, "flush", path), path + "flush");
  r.removed_by_ms = MillisValue(Member(json, "removed_by_ms", path), path + "removed_by_ms");
  return r;
}

Directive DirectiveFromJson(const Json& json) {
  Directive d;
  d.id = json.value("id", "");
  d.state = EnumField<governance::DirectiveState>(json, "state", "");
  d.failure = json.value("failure", "");
  d.reason = json.value("reason", "");
  d.model = json.value("model", "");
  d.tenant = json.value("tenant", "");
  d.subject = json.value("subject", "");
  d.scope = EnumField<KVEvictionScope>(json, "scope", "");
  d.target_count = json.value("targets", uint64_t{0});
  d.certificate_id = json.value("certificate_id", "");
  d.created_ms = json.value("created_ms", int64_t{0});
  d.deadline_ms = json.value("deadline_ms", int64_t{0});
  if (auto it = json.find("revocation"); it != json.end()) {
    d.revocation = RevocationFromJson(*it);
  }
  // Records written before owners were kept whole have none: they read
  // back with no owners, as they always did.
  for (const Json& o : json.value("owners", Json::array())) {
    if (!o.contains("pending_keys")) continue;
    const std::string path = "owners[" + std::to_string(d.owners.size()) + "].";
    OwnerProgress owner;
    owner.worker = o.value("worker", "");
    owner.connector = o.value("connector", "");
    owner.scope = OptionalEnumField<KVEvictionScope>(o, "scope", path);
    owner.degraded = o.value("degraded", false);
    owner.degrade_reason = o.value("degrade_reason", "");
    owner.attempts = o.value("attempts", 0);
    owner.last_status = o.value("last_status", 0);
    owner.last_error = o.value("last_error", "");
    owner.state = EnumField<governance::OwnerState>(o, "state", path);
    owner.whole_worker = o.value("whole_worker", false);
    owner.pending = o.at("pending_keys").get<std::set<index::BlockKey>>();
    owner.target_count = o.value("targets", uint64_t{0});
    owner.dispatch_seq = o.value("dispatch_seq", int64_t{-1});
    owner.witness_seqs = o.value("witness_seqs", std::vector<uint64_t>{});
    owner.witness_kind = OptionalEnumField<WitnessKind>(o, "witness_kind", path);
    owner.residue = OptionalCount(o, "residue", path);
    owner.unattributed = OptionalCount(o, "unattributed", path);
    d.owners.push_back(std::move(owner));
  }
  return d;
}

}  // namespace

std::string EncodeDirectiveJson(const Directive& directive) {
  return codec_internal::Dump(ToJson(directive, /*full=*/false));
}

std::string EncodeDirectiveRecord(const Directive& directive) {
  return codec_internal::Dump(ToJson(directive, /*full=*/true));
}

Result<Directive> DecodeDirectiveRecord(std::string_view record) {
  Json json = Json::parse(record, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("id") || !json["id"].is_string()) {
    return Status::InvalidArgument("directive record: not an object with an id");
  }
  try {
    return DirectiveFromJson(json);
  } catch (const Json::exception& error) {
    return Status::InvalidArgument(std::string("directive record: ") + error.what());
  } catch (const RecordError& error) {
    return Status::InvalidArgument(std::string("directive record: ") + error.what());
  }
}

}  // namespace kvgov

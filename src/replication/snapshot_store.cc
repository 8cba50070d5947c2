// The governance snapshot (docs/formats/governance-log.md, "Snapshots"):
// its encoding and its store in Redis, in chunks under a manifest.

#include "kvgov/replication/governance_log.h"

#include "kvgov/core/digest.h"
#include "replication/redis_values.h"

namespace kvgov::replication {
namespace {

using redis_values::FieldError;
using redis_values::IntegerField;
using redis_values::Json;
using redis_values::ParseBounded;
using redis_values::Quoted;
using redis_values::StringField;
using redis_values::StringPairs;
using redis_values::UnexpectedReply;

constexpr size_t kSnapshotChunkBytes = size_t{1} << 20;
constexpr size_t kMaxManifestBytes = 4096;

}  // namespace

std::string EncodeSnapshot(const GovernanceSnapshot& snapshot) {
  nlohmann::ordered_json object;
  object["v"] = 1;
  object["id"] = snapshot.id;
  object["journal"] = {{"seq", snapshot.journal_seq}, {"hash", snapshot.journal_hash}};
  auto pairs = [](const std::vector<std::pair<std::string, std::string>>& items) {
    nlohmann::ordered_json array = nlohmann::ordered_json::array();
    for (const auto& [key, value] : items) array.push_back({key, value});
    return array;
  };
  object["governance"] = pairs(snapshot.governance);
  object["tokens"] = pairs(snapshot.tokens);
  object["write_ids"] = pairs(snapshot.write_ids);
  return object.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

Result<GovernanceSnapshot> DecodeSnapshot(std::string_view bytes) {
  if (bytes.size() > kMaxSnapshotBytes) {
    return Status::InvalidArgument("snapshot: " + std::to_string(bytes.size()) +
                                   " bytes, over the limit of " +
                                   std::to_string(kMaxSnapshotBytes));
  }
  KVGOV_ASSIGN_OR_RETURN(Json value, ParseBounded(bytes, "snapshot"));
  if (!value.is_object()) return FieldError("snapshot", "want an object");
  for (const auto& [key, unused] : value.items()) {
    if (key != "v" && key != "id" && key != "journal" && key != "governance" && key != "tokens" &&
        key != "write_ids") {
      return FieldError(Quoted(key), "unknown field");
    }
  }
  KVGOV_ASSIGN_OR_RETURN(int64_t version, IntegerField(value, "v", "v"));
  if (version != 1) {
    return FieldError("v", "version " + std::to_string(version) + " is not supported (want 1)");
  }
  GovernanceSnapshot snapshot;
  KVGOV_ASSIGN_OR_RETURN(snapshot.id, StringField(value, "id", "id"));
  KVGOV_RETURN_IF_ERROR(ParseStreamId(snapshot.id).status().WithContext("id"));
  const auto journal = value.find("journal");
  if (journal == value.end() || !journal->is_object())
    return FieldError("journal", "want an object");
  KVGOV_ASSIGN_OR_RETURN(int64_t seq, IntegerField(*journal, "seq", "journal.seq"));
  if (seq < 0) return FieldError("journal.seq", "negative");
  snapshot.journal_seq = static_cast<uint64_t>(seq);
  KVGOV_ASSIGN_OR_RETURN(snapshot.journal_hash, StringField(*journal, "hash", "journal.hash"));
  KVGOV_ASSIGN_OR_RETURN(snapshot.governance, StringPairs(value, "governance"));
  KVGOV_ASSIGN_OR_RETURN(snapshot.tokens, StringPairs(value, "tokens"));
  KVGOV_ASSIGN_OR_RETURN(snapshot.write_ids, StringPairs(value, "write_ids"));
  return snapshot;
}

SnapshotStore::SnapshotStore(const RedisEndpoint& endpoint, std::string key_prefix,
                             std::chrono::milliseconds timeout)
    : prefix_(std::move(key_prefix)), connection_(endpoint, timeout) {}

namespace {

struct SnapshotManifest {
  std::string id;
  uint64_t chunks = 0;
  uint64_t bytes = 0;
  std::string sha256;
};

Result<std::optional<SnapshotManifest>> ReadManifest(RedisConnection& connection,
                                                     const std::string& key) {
  KVGOV_ASSIGN_OR_RETURN(RedisReply reply, connection.Command({"GET", key}));
  if (reply.type == RedisReply::Type::kNil) return std::optional<SnapshotManifest>();
  if (reply.type != RedisReply::Type::kString) return UnexpectedReply("GET", "want a string");
  if (reply.text.size() > kMaxManifestBytes) return FieldError("snapshot manifest", "too long");
  KVGOV_ASSIGN_OR_RETURN(Json json, ParseBounded(reply.text, "snapshot manifest"));
  if (!json.is_object()) return FieldError("snapshot manifest", "want an object");
  SnapshotManifest manifest;
  KVGOV_ASSIGN_OR_RETURN(manifest.id, StringField(json, "id", "snapshot manifest.id"));
  KVGOV_RETURN_IF_ERROR(ParseStreamId(manifest.id).status().WithContext("snapshot manifest.id"));
  KVGOV_ASSIGN_OR_RETURN(int64_t chunks, IntegerField(json, "chunks", "snapshot manifest.chunks"));
  KVGOV_ASSIGN_OR_RETURN(int64_t bytes, IntegerField(json, "bytes", "snapshot manifest.bytes"));
  if (bytes < 0 || static_cast<uint64_t>(bytes) > kMaxSnapshotBytes) {
    return FieldError("snapshot manifest.bytes", "out of range");
  }
  const uint64_t needed =
      (static_cast<uint64_t>(bytes) + kSnapshotChunkBytes - 1) / kSnapshotChunkBytes;
  if (chunks < 0 || static_cast<uint64_t>(chunks) != needed) {
    return FieldError("snapshot manifest.chunks", "does not match its bytes");
  }
  manifest.chunks = static_cast<uint64_t>(chunks);
  manifest.bytes = static_cast<uint64_t>(bytes);
  KVGOV_ASSIGN_OR_RETURN(manifest.sha256, StringField(json, "sha256", "snapshot manifest.sha256"));
  return std::optional<SnapshotManifest>(std::move(manifest));
}

std::string ChunkKey(const std::string& prefix, const std::string& id, uint64_t n) {
  return prefix + ":" + id + ":" + std::to_string(n);
}

}  // namespace

Status SnapshotStore::Put(const GovernanceSnapshot& snapshot) {
  const std::string encoded = EncodeSnapshot(snapshot);
  if (encoded.size() > kMaxSnapshotBytes) {
    return Status::InvalidArgument("snapshot: " + std::to_string(encoded.size()) +
                                   " bytes encoded, over the limit of " +
                                   std::to_string(kMaxSnapshotBytes));
  }
  MutexLock lock(mu_);
  Result<std::optional<SnapshotManifest>> previous = ReadManifest(connection_, prefix_);
  const uint64_t chunks = (encoded.size() + kSnapshotChunkBytes - 1) / kSnapshotChunkBytes;
  for (uint64_t n = 0; n < chunks; ++n) {
    const std::string args[] = {"SET", ChunkKey(prefix_, snapshot.id, n),
                                encoded.substr(n * kSnapshotChunkBytes, kSnapshotChunkBytes)};
    KVGOV_ASSIGN_OR_RETURN(RedisReply reply, connection_.Command(args));
    if (reply.type != RedisReply::Type::kStatus) return UnexpectedReply("SET", "want OK");
  }
  const Json manifest = {{"id", snapshot.id},
                         {"chunks", chunks},
                         {"bytes", encoded.size()},
                         {"sha256", Sha256Hex(encoded)}};
  KVGOV_ASSIGN_OR_RETURN(RedisReply set, connection_.Command({"SET", prefix_, manifest.dump()}));
  if (set.type != RedisReply::Type::kStatus) return UnexpectedReply("SET", "want OK");
  // The old chunks go after the switch; a reader still on them sees a
  // mismatch and reads the new manifest.
  if (previous.ok() && previous->has_value() && (*previous)->id != snapshot.id) {
    for (uint64_t n = 0; n < (*previous)->chunks; ++n) {
      (void)connection_.Command({"DEL", ChunkKey(prefix_, (*previous)->id, n)});
    }
  }
  return Status::Ok();
}

Result<std::optional<GovernanceSnapshot>> SnapshotStore::Get() {
  MutexLock lock(mu_);
  KVGOV_ASSIGN_OR_RETURN(std::optional<SnapshotManifest> manifest,
                         ReadManifest(connection_, prefix_));
  if (!manifest.has_value()) return std::optional<GovernanceSnapshot>();
  std::string encoded;
  encoded.reserve(manifest->bytes);
  for (uint64_t n = 0; n < manifest->chunks; ++n) {
    KVGOV_ASSIGN_OR_RETURN(RedisReply chunk,
                           connection_.Command({"GET", ChunkKey(prefix_, manifest->id, n)}));
    if (chunk.type != RedisReply::Type::kString ||
        chunk.text.size() > manifest->bytes - encoded.size()) {
      return Status::Unavailable("snapshot " + manifest->id + ": chunk " + std::to_string(n) +
                                 " is missing or too long (replaced while read)");
    }
    encoded += chunk.text;
  }
  if (encoded.size() != manifest->bytes || Sha256Hex(encoded) != manifest->sha256) {
    return Status::Unavailable("snapshot " + manifest->id +
                               ": chunks do not match the manifest (replaced while read)");
  }
  KVGOV_ASSIGN_OR_RETURN(GovernanceSnapshot snapshot, DecodeSnapshot(encoded));
  if (snapshot.id != manifest->id) {
    return Status::InvalidArgument("snapshot: id " + Quoted(snapshot.id) +
                                   " is not the manifest's " + Quoted(manifest->id));
  }
  return std::optional<GovernanceSnapshot>(std::move(snapshot));
}

}  // namespace kvgov::replication

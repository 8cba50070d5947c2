#include "kvgov/log/log.h"
#include "kvgov/replication/replica.h"

#include <utility>

#include "kvgov/auth/tokens.h"

namespace kvgov::replication {
namespace {

constexpr std::string_view kCursorKey = "replication/applied";
constexpr std::string_view kGovernanceColumn = "governance";
constexpr std::string_view kTokensColumn = "tokens";
constexpr size_t kReadBatch = 256;
constexpr auto kReadBlock = std::chrono::milliseconds(500);
// Rows kept for writers that have not come back for theirs (timed out).
constexpr size_t kMaxUnclaimedRows = 4096;

// An entry's content that every replica refuses alike (a bad token record,
// a row over the journal's limit), unlike a failure of this replica's disk.
bool RefusedByContent(const Status& status) {
  return status.code() == StatusCode::kInvalidArgument ||
         status.code() == StatusCode::kResourceExhausted;
}

std::string StreamKey(std::string_view prefix) { return std::string(prefix) + ":governance"; }
std::string ClaimPrefix(std::string_view prefix) { return std::string(prefix) + ":claim:"; }
std::string LoadPrefix(std::string_view prefix) { return std::string(prefix) + ":load:"; }

// A token write from the log, put into (or taken out of) the token file.
// Idempotent, so an entry re-applied after a crash changes nothing more.
Status ApplyTokenWrite(const std::string& token_path, const LogWrite& write) {
  if (!write.value.has_value()) {
    Status revoked = auth::RevokeToken(token_path, write.key);
    return revoked.code() == StatusCode::kNotFound ? Status::Ok() : revoked;
  }
  KVGOV_ASSIGN_OR_RETURN(auth::TokenRecord record, auth::DecodeTokenRecord(*write.value));
  if (record.name != write.key) {
    return Status::InvalidArgument("token write: key '" + write.key + "' names another token");
  }
  return auth::PutTokenRecord(token_path, record);
}

}  // namespace

Replica::Replica(ReplicaOptions options, const RedisEndpoint& endpoint,
                 journal::Journal* journal, store::Store* store, router::Router* router,
                 ApplyHook hook)
    : options_(std::move(options)),
      journal_(journal),
      store_(store),
      router_(router),
      hook_(std::move(hook)),
      log_(endpoint, StreamKey(options_.key_prefix), options_.redis_timeout),
      claims_(endpoint, ClaimPrefix(options_.key_prefix), options_.redis_timeout),
      load_board_(endpoint, LoadPrefix(options_.key_prefix), options_.replica_id,
                  options_.claim_ttl, options_.redis_timeout) {}

Result<std::unique_ptr<Replica>> Replica::Start(ReplicaOptions options,
                                                journal::Journal* journal, store::Store* store,
                                                router::Router* router, ApplyHook hook) {
  KVGOV_ASSIGN_OR_RETURN(RedisEndpoint endpoint,
                         ParseRedisUrl(options.redis_url));
  KVGOV_ASSIGN_OR_RETURN(std::optional<std::string> cursor,
                         store->Get(store::Column::kMeta, std::string(kCursorKey)));
  if (!cursor.has_value() && journal->head_seq() > 0) {
    // Its rows are not in the log: the chain could never match the others'.
    return Status::FailedPrecondition(
        "the data dir's journal has " + std::to_string(journal->head_seq()) +
        " rows that did not come from the governance log; a replica needs a fresh data dir "
        "(or one that has always been a replica)");
  }
  std::unique_ptr<Replica> replica(
      new Replica(std::move(options), endpoint, journal, store, router, std::move(hook)));
  if (cursor.has_value()) {
    Result<StreamId> applied = ParseStreamId(*cursor);
    if (!applied.ok()) return applied.status().WithContext("the replica's applied stream id");
    replica->applied_ = *applied;
  }
  Result<std::string> last = replica->log_.LastId();
  replica->applier_ = std::thread([r = replica.get()] { r->ApplyLoop(); });
  replica->heartbeat_ = std::thread([r = replica.get()] { r->HeartbeatLoop(); });
  if (!last.ok()) {
log::Line(log::Level::kWarn, "replica.log_unreachable")
        .Field("replica", replica->id())
        .Field("error", last.status().ToString())
        .Field("detail", "serving on local state; governance writes refused until it returns");
    return replica;
  }
  KVGOV_ASSIGN_OR_RETURN(StreamId target, ParseStreamId(*last));
  std::unique_lock lock(replica->mu_);
  if (!replica->applied_cv_.wait_for(lock, replica->options_.catch_up_wait,
                                     [&] { return replica->applied_ >= target; })) {
log::Line(log::Level::kWarn, "replica.catching_up")
        .Field("replica", replica->id())
        .Field("applied", replica->applied_.ToString())
        .Field("last", *last);
  }
  return replica;
}

Replica::~Replica() { Stop(); }

void Replica::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  applied_cv_.notify_all();
  if (applier_.joinable()) applier_.join();
  if (heartbeat_.joinable()) heartbeat_.join();
  if (housekeeper_.exchange(false)) (void)claims_.Release("housekeeper", options_.replica_id);
}

std::string Replica::applied_id() const {
  std::lock_guard lock(mu_);
  return applied_.ToString();
}

Result<journal::Row> Replica::Record(std::string_view kind, std::string_view subject,
                                     std::string_view actor, std::string_view payload,
                                     std::span<const store::WriteOp> state) {
  const journal::Attribution by{std::string(actor), options_.replica_id};
  // Refused here, not after the append: every replica would refuse the row.
  if (!kind.empty()) KVGOV_RETURN_IF_ERROR(journal::CheckRowFits(kind, subject, by, payload));
  LogEntry entry;
  entry.origin = options_.replica_id;
  entry.actor = std::string(actor);
  entry.kind = std::string(kind);
  entry.subject = std::string(subject);
  entry.payload = std::string(payload);
  entry.time_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  for (const store::WriteOp& op : state) {
    if (op.column != store::Column::kGovernance) {
      return Status::InvalidArgument("a replicated write goes to the governance column only");
    }
    entry.writes.push_back(LogWrite{std::string(kGovernanceColumn), op.key, op.value});
  }
  Result<std::string> appended = log_.Append(entry);
  if (!appended.ok()) {
    if (appended.status().code() == StatusCode::kInvalidArgument) return appended.status();
    return Status::Unavailable("the governance log is unreachable, so governance writes are "
                               "refused until it returns: " +
                               appended.status().message());
  }
  KVGOV_ASSIGN_OR_RETURN(StreamId id, ParseStreamId(*appended));
  std::unique_lock lock(mu_);
  if (!applied_cv_.wait_for(lock, options_.apply_wait,
                            [&] { return stopping_ || applied_ >= id; }) ||
      applied_ < id) {
    return Status::Unavailable("appended to the governance log as " + *appended +
                               " but not yet applied here");
  }
  auto row = own_rows_.find(*appended);
  if (row == own_rows_.end()) return journal::Row{};
  Result<journal::Row> result = std::move(row->second);
  own_rows_.erase(row);
  return result;
}

Result<std::string> Replica::AppendOnce(const std::string& redis_url, std::string_view prefix,
                                        const LogEntry& entry) {
  KVGOV_ASSIGN_OR_RETURN(RedisEndpoint endpoint,
                         ParseRedisUrl(redis_url));
  GovernanceLog log(endpoint, StreamKey(prefix), std::chrono::milliseconds(2000));
  return log.Append(entry);
}

Result<bool> Replica::Claim(std::string_view name) {
  return claims_.Acquire(name, options_.replica_id, options_.claim_ttl);
}

Result<bool> Replica::RenewClaim(std::string_view name) {
  return claims_.Renew(name, options_.replica_id, options_.claim_ttl);
}

void Replica::ReleaseClaim(std::string_view name) {
  (void)claims_.Release(name, options_.replica_id);
}

bool Replica::WaitFor(std::chrono::milliseconds period) {
  std::unique_lock lock(mu_);
  return !stop_cv_.wait_for(lock, period, [this] { return stopping_; });
}

void Replica::ApplyLoop() {
  std::string after;
  {
    std::lock_guard lock(mu_);
    after = applied_.ToString();
  }
  auto backoff = std::chrono::milliseconds(50);
  while (true) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
    }
    Result<LogBatch> batch = log_.ReadAfter(after, kReadBatch, kReadBlock);
    if (!batch.ok()) {
      if (connected_.exchange(false)) {
log::Line(log::Level::kWarn, "replica.log_lost")
            .Field("replica", options_.replica_id)
            .Field("error", batch.status().ToString());
      }
      if (!WaitFor(backoff)) return;
      backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
      continue;
    }
    if (!connected_.exchange(true)) {
log::Line(log::Level::kInfo, "replica.log_following")
          .Field("replica", options_.replica_id)
          .Field("after", after);
    }
    backoff = std::chrono::milliseconds(50);
    // An entry every replica refuses alike (bytes that do not decode, or
    // content a replica cannot apply: InvalidArgument) is skipped alike, so
    // the chains stay equal, and never retried (it would wedge the log).
    for (const auto& [id, why] : batch->rejected) NoteSkipped(id, why);
    for (const LogEntry& entry : batch->entries) {
      while (true) {
        Status applied = Apply(entry);
        if (RefusedByContent(applied)) {
          NoteSkipped(entry.id, applied);
          applied = Skip(entry, applied);
        }
        if (applied.ok()) break;
log::Line(log::Level::kError, "replica.entry_retrying")
            .Field("replica", options_.replica_id)
            .Field("entry", entry.id)
            .Field("error", applied.ToString());
        if (!WaitFor(std::chrono::milliseconds(1000))) return;
      }
      after = entry.id;
    }
    if (!batch->rejected.empty() && batch->last_id != after) {
      // The batch ended on skipped entries: the cursor moves past them too.
      if (Status moved = AdvanceCursor(batch->last_id); moved.ok()) after = batch->last_id;
    }
  }
}

Status Replica::AdvanceCursor(const std::string& id) {
  KVGOV_ASSIGN_OR_RETURN(StreamId parsed, ParseStreamId(id));
  const store::WriteOp cursor{store::Column::kMeta, std::string(kCursorKey), id};
  KVGOV_RETURN_IF_ERROR(store_->Write({&cursor, 1}, /*sync=*/true));
  {
    std::lock_guard lock(mu_);
    if (applied_ < parsed) applied_ = parsed;
  }
  applied_cv_.notify_all();
  return Status::Ok();
}

void Replica::NoteSkipped(const std::string& id, const Status& why) {
  rejected_.fetch_add(1);
log::Line(log::Level::kWarn, "replica.entry_skipped")
      .Field("replica", options_.replica_id)
      .Field("entry", id)
      .Field("error", why.ToString());
}

Status Replica::Skip(const LogEntry& entry, const Status& why) {
  if (entry.origin == options_.replica_id) {
    // Its writer learns why instead of a row (before the cursor moves and
    // wakes it).
    std::lock_guard lock(mu_);
    own_rows_.emplace(entry.id, why);
  }
  return AdvanceCursor(entry.id);
}

Status Replica::Apply(const LogEntry& entry) {
  KVGOV_ASSIGN_OR_RETURN(StreamId id, ParseStreamId(entry.id));
  const journal::Attribution by{entry.actor, entry.origin};
  if (!entry.kind.empty()) {
    KVGOV_RETURN_IF_ERROR(journal::CheckRowFits(entry.kind, entry.subject, by, entry.payload));
  }
  std::vector<store::WriteOp> ops;
  for (const LogWrite& write : entry.writes) {
    if (write.column == kTokensColumn) {
      // Before the cursor moves: a crash in between re-applies the entry,
      // and a token write is idempotent. A record every replica refuses
      // (InvalidArgument) makes the whole entry skipped.
      KVGOV_RETURN_IF_ERROR(ApplyTokenWrite(options_.token_path, write));
    } else {
      ops.push_back(store::WriteOp{store::Column::kGovernance, write.key, write.value});
    }
  }
  ops.push_back(store::WriteOp{store::Column::kMeta, std::string(kCursorKey), entry.id});
  journal::Row row;
  if (entry.kind.empty()) {
    KVGOV_RETURN_IF_ERROR(store_->Write(ops, /*sync=*/true));
  } else {
    KVGOV_ASSIGN_OR_RETURN(row, journal_->Append(entry.kind, entry.subject, by, entry.payload,
                                                 entry.time_ms, ops));
  }
  if (hook_) hook_(entry);
  {
    std::lock_guard lock(mu_);
    applied_ = id;
    if (entry.origin == options_.replica_id) {
      own_rows_.emplace(entry.id, std::move(row));
      while (own_rows_.size() > kMaxUnclaimedRows) own_rows_.erase(own_rows_.begin());
    }
  }
  applied_cv_.notify_all();
  return Status::Ok();
}

void Replica::HeartbeatLoop() {
  const auto renew_every = options_.claim_ttl / 3;
  auto next_renew = std::chrono::steady_clock::now();
  while (WaitFor(options_.load_interval)) {
    if (router_ != nullptr) {
      // Bounded staleness: a peer's load is at most load_interval old when
      // read, and a dead peer's stops counting after claim_ttl.
      (void)load_board_.Publish(router_->InFlightBlocks());
      Result<std::map<std::string, uint64_t, std::less<>>> peers = load_board_.PeerTotals();
      if (peers.ok()) router_->SetPeerLoad(std::move(peers).value());
    }
    if (std::chrono::steady_clock::now() >= next_renew) {
      next_renew = std::chrono::steady_clock::now() + renew_every;
      Result<bool> held = claims_.Acquire("housekeeper", options_.replica_id, options_.claim_ttl);
      housekeeper_.store(held.ok() && *held);
    }
  }
}

}  // namespace kvgov::replication

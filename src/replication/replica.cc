#include "kvgov/replication/replica.h"

#include <algorithm>
#include <set>
#include <utility>

#include "kvgov/auth/entropy.h"
#include "kvgov/auth/tokens.h"
#include "kvgov/clock/clock.h"
#include "kvgov/log/log.h"

namespace kvgov::replication {
namespace {

constexpr std::string_view kCursorKey = "replication/applied";
constexpr std::string_view kInstanceKey = "replication/instance";
constexpr std::string_view kLogIdentityKey = "replication/log_identity";
// meta "replication/write/<write id>" -> the stream id it was applied at.
constexpr std::string_view kWriteIdPrefix = "replication/write/";
// A write id is remembered this long, by stream time: far longer than a
// writer retries one append (a second or two), short enough to keep the
// set small at thousands of writes a second.
constexpr uint64_t kWriteIdWindowMs = uint64_t{10} * 60 * 1000;
// A writer's appends of one entry: the first, and retries after a broken
// connection, which the write id makes safe.
constexpr int kAppendAttempts = 3;
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

// What a guard returns for its own trouble, not the entry's.
bool IsLocalFailure(const Status& status) {
  return status.code() == StatusCode::kUnavailable || status.code() == StatusCode::kIOError ||
         status.code() == StatusCode::kInternal;
}

std::string StreamKey(std::string_view prefix) { return std::string(prefix) + ":governance"; }
std::string ClaimPrefix(std::string_view prefix) { return std::string(prefix) + ":claim:"; }
std::string LoadPrefix(std::string_view prefix) { return std::string(prefix) + ":load:"; }
std::string AppliedPrefix(std::string_view prefix) { return std::string(prefix) + ":applied:"; }
std::string SnapshotKey(std::string_view prefix) { return std::string(prefix) + ":snapshot"; }
std::string IdClaim(std::string_view replica_id) { return "replica/" + std::string(replica_id); }

// Appends an entry that has a write id, sending it again after a failure
// that may be a lost reply (Unavailable): the id makes that safe, and the
// connection it broke on is made anew. `pause(attempt)` waits before retry
// `attempt + 1`; false gives up.
Result<std::string> AppendRetrying(GovernanceLog& log, const LogEntry& entry,
                                   const std::function<bool(int)>& pause) {
  Result<std::string> appended = Status::Unavailable("not appended");
  for (int attempt = 1; attempt <= kAppendAttempts; ++attempt) {
    appended = log.Append(entry);
    if (appended.ok() || appended.status().code() != StatusCode::kUnavailable) break;
    if (attempt < kAppendAttempts && !pause(attempt)) break;
  }
  return appended;
}

// The owner of this data dir's replica id claim: made once, kept in the
// store, so a restart on the same data dir is the same instance.
Result<std::string> InstanceToken(store::Store* store) {
  KVGOV_ASSIGN_OR_RETURN(std::optional<std::string> stored,
                         store->Get(store::Column::kMeta, std::string(kInstanceKey)));
  if (stored.has_value()) return *stored;
  KVGOV_ASSIGN_OR_RETURN(std::string made, auth::RandomHexId());
  const store::WriteOp op{store::Column::kMeta, std::string(kInstanceKey), made};
  KVGOV_RETURN_IF_ERROR(store->Write({&op, 1}, /*sync=*/true));
  return made;
}

// A token write's record, checked as every replica checks it; nullopt for
// a revoke. InvalidArgument (the entry is refused alike everywhere) for a
// record that does not decode or names another token than its key.
Result<std::optional<auth::TokenRecord>> DecodeTokenWrite(const LogWrite& write) {
  if (!write.value.has_value()) return std::optional<auth::TokenRecord>();
  KVGOV_ASSIGN_OR_RETURN(auth::TokenRecord record, auth::DecodeTokenRecord(*write.value));
  if (record.name != write.key) {
    return Status::InvalidArgument("token write: key '" + write.key + "' names another token");
  }
  return std::optional<auth::TokenRecord>(std::move(record));
}

// A token write from the log, put into (or taken out of) the token file.
// Idempotent, so an entry re-applied after a crash changes nothing more.
Status ApplyTokenWrite(const std::string& token_path, const LogWrite& write) {
  KVGOV_ASSIGN_OR_RETURN(std::optional<auth::TokenRecord> record, DecodeTokenWrite(write));
  if (!record.has_value()) {
    Status revoked = auth::RevokeToken(token_path, write.key);
    return revoked.code() == StatusCode::kNotFound ? Status::Ok() : revoked;
  }
  return auth::PutTokenRecord(token_path, *record);
}

// The token file a replica builds from the log, built in memory instead
// (kvgov token list --redis): the same records in the same order as
// auth::PutTokenRecord and auth::RevokeToken leave them, and the same
// write ids remembered over the same window, so a retried append is
// applied once here too.
class TokenFold {
 public:
  // Where a snapshot leaves a replica (Replica::InstallSnapshot).
  Status Install(const GovernanceSnapshot& snapshot) {
    for (const auto& [name, value] : snapshot.tokens) {
      KVGOV_ASSIGN_OR_RETURN(std::optional<auth::TokenRecord> record,
                             DecodeTokenWrite(LogWrite{"tokens", name, value}));
      Put(std::move(*record));
    }
    std::vector<std::pair<StreamId, std::string>> loaded;
    for (const auto& [write_id, first] : snapshot.write_ids) {
      Result<StreamId> at = ParseStreamId(first);
      if (!at.ok()) return at.status().WithContext("snapshot write id");
      loaded.emplace_back(*at, write_id);
    }
    std::sort(loaded.begin(), loaded.end());
    for (auto& [at, write_id] : loaded) {
      write_ids_.emplace(write_id, at);
      order_.emplace_back(at, std::move(write_id));
    }
    return Status::Ok();
  }

  // One entry, as Replica::Apply takes it (the guard aside: it refuses
  // only entries that carry lease records, which token changes never do).
  void Apply(const LogEntry& entry) {
    const Result<StreamId> id = ParseStreamId(entry.id);
    if (!id.ok()) return;
    if (!entry.write_id.empty() && write_ids_.contains(entry.write_id)) return;  // a duplicate
    const journal::Attribution by{entry.actor, entry.origin};
    if (entry.kind.empty() ||
        journal::CheckRowFits(entry.kind, entry.subject, by, entry.payload).ok()) {
      for (const LogWrite& write : entry.writes) {
        if (write.column != kTokensColumn) continue;
        // A refused write skips the rest of the entry; the ones before it
        // stay, as they stay in a replica's file.
        Result<std::optional<auth::TokenRecord>> record = DecodeTokenWrite(write);
        if (!record.ok()) break;
        changed_at_[write.key] = entry.id;
        if (record->has_value()) {
          Put(std::move(**record));
        } else {
          std::erase_if(tokens_,
                        [&](const auth::TokenRecord& token) { return token.name == write.key; });
        }
      }
    }
    // Applied or skipped alike, its write id is remembered
    // (Replica::RememberWriteId).
    while (!order_.empty() && order_.front().first.ms + kWriteIdWindowMs < id->ms) {
      write_ids_.erase(order_.front().second);
      order_.pop_front();
    }
    if (!entry.write_id.empty() && write_ids_.emplace(entry.write_id, *id).second) {
      order_.emplace_back(*id, entry.write_id);
    }
  }

  std::vector<auth::TokenRecord> TakeTokens() { return std::move(tokens_); }
  std::map<std::string, std::string> TakeChangedAt() { return std::move(changed_at_); }

 private:
  void Put(auth::TokenRecord record) {
    auto it = std::find_if(tokens_.begin(), tokens_.end(), [&](const auth::TokenRecord& token) {
      return token.name == record.name;
    });
    if (it == tokens_.end()) {
      tokens_.push_back(std::move(record));
    } else {
      *it = std::move(record);
    }
  }

  std::vector<auth::TokenRecord> tokens_;
  std::map<std::string, std::string> changed_at_;  // name -> the last entry that wrote it
  std::map<std::string, StreamId, std::less<>> write_ids_;
  std::deque<std::pair<StreamId, std::string>> order_;
};

// One read of the tokens: the snapshot, then every entry after it. Unavailable
// also when the housekeeper replaced the snapshot or trimmed past it during
// the read (read again).
Result<ReplicatedTokens> ReadTokensOnce(GovernanceLog& log, SnapshotStore& snapshots) {
  KVGOV_ASSIGN_OR_RETURN(std::optional<GovernanceSnapshot> snapshot, snapshots.Get());
  TokenFold fold;
  ReplicatedTokens read;
  StreamId from;
  if (snapshot.has_value()) {
    KVGOV_ASSIGN_OR_RETURN(from, ParseStreamId(snapshot->id));
    KVGOV_RETURN_IF_ERROR(fold.Install(*snapshot).WithContext("snapshot " + snapshot->id));
    read.snapshot = snapshot->id;
  }
  std::string after = from.ToString();
  while (true) {
    KVGOV_ASSIGN_OR_RETURN(LogBatch batch,
                           log.ReadAfter(after, kReadBatch, std::chrono::milliseconds(0)));
    if (batch.last_id == after) break;
    for (const LogEntry& entry : batch.entries) fold.Apply(entry);
    after = batch.last_id;
  }
  // After the read, as a replica checks (Replica::MissedHistory): entries
  // older than the mark may be gone, so a start below it may have missed
  // some.
  KVGOV_ASSIGN_OR_RETURN(std::optional<StreamId> trimmed, log.TrimmedBelow());
  if (trimmed.has_value() && from < *trimmed) {
    return Status::Unavailable(
        "the governance log was trimmed below " + trimmed->ToString() + " and " +
        (snapshot.has_value() ? "the snapshot read (" + snapshot->id + ") is older"
                              : std::string("no snapshot is in Redis")) +
        ": the tokens cannot be read whole from Redis now");
  }
  read.tokens = fold.TakeTokens();
  read.changed_at = fold.TakeChangedAt();
  read.as_of = after;
  return read;
}

}  // namespace

Replica::Replica(ReplicaOptions options, const RedisEndpoint& endpoint, std::string instance,
                 journal::Journal* journal, store::Store* store, router::Router* router,
                 Hooks hooks)
    : options_(std::move(options)),
      instance_(std::move(instance)),
      journal_(journal),
      store_(store),
      router_(router),
      hooks_(std::move(hooks)),
      log_(endpoint, StreamKey(options_.key_prefix), options_.redis_timeout),
      claims_(endpoint, ClaimPrefix(options_.key_prefix), options_.redis_timeout),
      load_board_(endpoint, LoadPrefix(options_.key_prefix), options_.replica_id,
                  options_.claim_ttl, options_.redis_timeout),
      applied_board_(endpoint, AppliedPrefix(options_.key_prefix), options_.replica_id,
                     options_.claim_ttl, options_.redis_timeout),
      snapshots_(endpoint, SnapshotKey(options_.key_prefix), options_.redis_timeout),
      next_snapshot_(std::chrono::steady_clock::now() + options_.snapshot_interval) {}

Result<std::unique_ptr<Replica>> Replica::Start(ReplicaOptions options, journal::Journal* journal,
                                                store::Store* store, router::Router* router,
                                                Hooks hooks) {
  KVGOV_ASSIGN_OR_RETURN(RedisEndpoint endpoint, ParseRedisUrl(options.redis_url));
  KVGOV_ASSIGN_OR_RETURN(std::optional<std::string> cursor,
                         store->Get(store::Column::kMeta, std::string(kCursorKey)));
  if (!cursor.has_value() && journal->head_seq() > 0) {
    // Its rows are not in the log: the chain could never match the others'.
    return Status::FailedPrecondition(
        "the data dir's journal has " + std::to_string(journal->head_seq()) +
        " rows that did not come from the governance log; a replica needs a fresh data dir "
        "(or one that has always been a replica)");
  }
  KVGOV_ASSIGN_OR_RETURN(std::string instance, InstanceToken(store));
  std::unique_ptr<Replica> replica(new Replica(std::move(options), endpoint, std::move(instance),
                                               journal, store, router, std::move(hooks)));
  StreamId applied;
  if (cursor.has_value()) {
    Result<StreamId> parsed = ParseStreamId(*cursor);
    if (!parsed.ok()) return parsed.status().WithContext("the replica's applied stream id");
    applied = *parsed;
  }
  KVGOV_RETURN_IF_ERROR(replica->LoadWriteIds());
  KVGOV_ASSIGN_OR_RETURN(std::optional<std::string> identity,
                         store->Get(store::Column::kMeta, std::string(kLogIdentityKey)));
  {
    // Nobody else has the replica yet; locked so that every access is.
    MutexLock lock(replica->mu_);
    replica->applied_ = applied;
    replica->log_identity_ = identity.value_or("");
  }
  // Two processes under one id would share its claims and its rows'
  // origin: the second is refused while the first is alive.
  Result<bool> claimed = replica->claims_.Acquire(IdClaim(replica->id()), replica->instance_,
                                                  replica->options_.claim_ttl);
  if (claimed.ok() && !*claimed) {
    return Status::FailedPrecondition(
        "replica id '" + replica->id() +
        "' is held by another running kvgov (its claim in Redis "
        "is renewed every " +
        std::to_string(replica->options_.claim_ttl.count() / 3) +
        " ms); give this process its own --replica-id, or stop the other one first");
  }
  // Counted as live before its first heartbeat: a restarted replica holds
  // the trim back from the start.
  (void)replica->applied_board_.Publish(applied);
  (void)replica->CheckLogIdentity();  // Redis away: checked again by both loops
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
  MutexLock lock(replica->mu_);
  // Waits here are loops, not predicates: the thread-safety analysis cannot
  // see a lambda run under the lock.
  const auto due = std::chrono::steady_clock::now() + replica->options_.catch_up_wait;
  while (replica->applied_ < target &&
         replica->applied_cv_.wait_until(lock, due) != std::cv_status::timeout) {
    continue;
  }
  if (replica->applied_ >= target) {
    replica->caught_up_.store(true);
  } else {
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
    MutexLock lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  applied_cv_.notify_all();
  if (applier_.joinable()) applier_.join();
  if (heartbeat_.joinable()) heartbeat_.join();
  if (housekeeper_.exchange(false)) (void)claims_.Release("housekeeper", options_.replica_id);
  if (!fatal_.load()) (void)claims_.Release(IdClaim(id()), instance_);
}

std::string Replica::applied_id() const {
  MutexLock lock(mu_);
  return applied_.ToString();
}

Result<journal::Row> Replica::Record(std::string_view kind, std::string_view subject,
                                     std::string_view actor, std::string_view payload,
                                     std::span<const store::WriteOp> state) {
  if (fatal_.load()) {
    return Status::Unavailable("this process no longer serves as replica '" + id() +
                               "': another process holds its id");
  }
  if (log_reset_.load()) return LogResetError();
  const journal::Attribution by{std::string(actor), options_.replica_id};
  // Refused here, not after the append: every replica would refuse the row.
  if (!kind.empty()) KVGOV_RETURN_IF_ERROR(journal::CheckRowFits(kind, subject, by, payload));
  LogEntry entry;
  KVGOV_ASSIGN_OR_RETURN(entry.write_id, auth::RandomHexId());
  entry.origin = options_.replica_id;
  entry.actor = std::string(actor);
  entry.kind = std::string(kind);
  entry.subject = std::string(subject);
  entry.payload = std::string(payload);
  // Never before the head this replica has applied: one process's rows stay
  // ordered by time, and rows from several keep the order their writers saw.
  entry.time_ms = std::max(clock::NowMillis(), journal_->head_time_ms());
  for (const store::WriteOp& op : state) {
    if (op.column != store::Column::kGovernance) {
      return Status::InvalidArgument("a replicated write goes to the governance column only");
    }
    if (!op.range_end.empty()) {
      return Status::InvalidArgument("a replicated write names its keys: no range deletes");
    }
    entry.writes.push_back(LogWrite{std::string(kGovernanceColumn), op.key, op.value});
  }
  Result<std::string> appended = AppendRetrying(log_, entry, [this](int attempt) {
    return WaitFor(std::chrono::milliseconds(25 * attempt));
  });
  if (!appended.ok()) {
    if (appended.status().code() == StatusCode::kInvalidArgument) return appended.status();
    return Status::Unavailable(
        "the governance log is unreachable, so governance writes are "
        "refused until it returns: " +
        appended.status().message());
  }
  KVGOV_ASSIGN_OR_RETURN(StreamId id, ParseStreamId(*appended));
  MutexLock lock(mu_);
  const auto due = std::chrono::steady_clock::now() + options_.apply_wait;
  while (!stopping_ && applied_ < id &&
         applied_cv_.wait_until(lock, due) != std::cv_status::timeout) {
    continue;
  }
  if (applied_ < id) {
    return Status::Unavailable("appended to the governance log as " + *appended +
                               " but not yet applied here");
  }
  auto row = own_rows_.find(entry.write_id);
  if (row == own_rows_.end()) {
    return Status::Unavailable("appended to the governance log as " + *appended +
                               ", but its outcome is not known here: this replica installed a "
                               "snapshot over it");
  }
  Result<journal::Row> result = std::move(row->second.outcome);
  own_rows_.erase(row);
  return result;
}

Result<std::string> Replica::AppendOnce(const std::string& redis_url, std::string_view prefix,
                                        const LogEntry& entry) {
  KVGOV_ASSIGN_OR_RETURN(RedisEndpoint endpoint, ParseRedisUrl(redis_url));
  GovernanceLog log(endpoint, StreamKey(prefix), std::chrono::milliseconds(2000));
  LogEntry named = entry;
  if (named.write_id.empty()) {
    KVGOV_ASSIGN_OR_RETURN(named.write_id, auth::RandomHexId());
  }
  return AppendRetrying(log, named, [](int) { return true; });
}

Result<ReplicatedTokens> Replica::ReadTokens(const std::string& redis_url,
                                             std::string_view prefix) {
  KVGOV_ASSIGN_OR_RETURN(RedisEndpoint endpoint, ParseRedisUrl(redis_url));
  const auto timeout = std::chrono::milliseconds(2000);
  GovernanceLog log(endpoint, StreamKey(prefix), timeout);
  SnapshotStore snapshots(endpoint, SnapshotKey(prefix), timeout);
  Result<ReplicatedTokens> read = Status::Unavailable("not read");
  // A housekeeper may replace its snapshot, or trim, under a read: a
  // second read sees the new one whole.
  for (int attempt = 1; attempt <= kAppendAttempts; ++attempt) {
    read = ReadTokensOnce(log, snapshots);
    if (read.ok() || read.status().code() != StatusCode::kUnavailable) break;
  }
  return read;
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
  MutexLock lock(mu_);
  const auto due = std::chrono::steady_clock::now() + period;
  while (!stopping_ && stop_cv_.wait_until(lock, due) != std::cv_status::timeout) continue;
  return !stopping_;
}

void Replica::ApplyLoop() {
  std::string after;
  {
    MutexLock lock(mu_);
    after = applied_.ToString();
  }
  auto backoff = std::chrono::milliseconds(50);
  while (true) {
    {
      MutexLock lock(mu_);
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
    // Entries of another log than the one followed (Redis lost its data and
    // a new log began) are not applied on top of this one's state.
    if ((!batch->entries.empty() || !batch->rejected.empty()) && !CheckLogIdentity()) {
      if (!WaitFor(std::chrono::milliseconds(1000))) return;
      continue;
    }
    // After the read: a trim between the last check and the read would
    // otherwise put this batch after a hole.
    Result<bool> missed = MissedHistory();
    if (!missed.ok()) {
      // Redis went away between the two (or the mark is not ours): the
      // batch is read again once the mark can be read.
      if (!WaitFor(backoff)) return;
      continue;
    }
    if (*missed) {
      if (Status installed = InstallSnapshot(); !installed.ok()) {
        log::Line(log::Level::kError, "replica.snapshot_install_failed")
            .Field("replica", options_.replica_id)
            .Field("error", installed.ToString());
        if (!WaitFor(std::chrono::milliseconds(1000))) return;
      }
      MutexLock lock(mu_);
      after = applied_.ToString();
      continue;
    }
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
    // A read shorter than asked for reached the stream's end, and all of it
    // is applied: this replica knows what the fleet knew then.
    if (batch->entries.size() + batch->rejected.size() < kReadBatch) caught_up_.store(true);
    MaybeSnapshotAndTrim();
  }
}

Status Replica::AdvanceCursor(const std::string& id) {
  KVGOV_ASSIGN_OR_RETURN(StreamId parsed, ParseStreamId(id));
  const store::WriteOp cursor{store::Column::kMeta, std::string(kCursorKey), id};
  KVGOV_RETURN_IF_ERROR(store_->Write({&cursor, 1}, /*sync=*/true));
  {
    MutexLock lock(mu_);
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

void Replica::SettleOwn(const LogEntry& entry, const StreamId& id, Result<journal::Row> outcome) {
  if (entry.origin != options_.replica_id || entry.write_id.empty()) return;
  MutexLock lock(mu_);
  own_rows_.emplace(entry.write_id, OwnOutcome{id, std::move(outcome)});
  if (own_rows_.size() > kMaxUnclaimedRows) {
    // Only writers that gave up leave rows behind: the oldest goes.
    auto oldest =
        std::min_element(own_rows_.begin(), own_rows_.end(),
                         [](const auto& a, const auto& b) { return a.second.at < b.second.at; });
    own_rows_.erase(oldest);
  }
}

std::vector<store::WriteOp> Replica::WriteIdOps(const LogEntry& entry, const StreamId& id) const {
  std::vector<store::WriteOp> ops;
  for (const auto& [at, write_id] : write_id_order_) {
    if (at.ms + kWriteIdWindowMs >= id.ms) break;
    ops.push_back({store::Column::kMeta, std::string(kWriteIdPrefix) + write_id, std::nullopt});
  }
  if (!entry.write_id.empty()) {
    ops.push_back(
        {store::Column::kMeta, std::string(kWriteIdPrefix) + entry.write_id, id.ToString()});
  }
  return ops;
}

void Replica::RememberWriteId(const LogEntry& entry, const StreamId& id) {
  while (!write_id_order_.empty() && write_id_order_.front().first.ms + kWriteIdWindowMs < id.ms) {
    write_ids_.erase(write_id_order_.front().second);
    write_id_order_.pop_front();
  }
  if (!entry.write_id.empty() && write_ids_.emplace(entry.write_id, id).second) {
    write_id_order_.emplace_back(id, entry.write_id);
  }
}

Status Replica::LoadWriteIds() {
  std::vector<std::pair<StreamId, std::string>> loaded;
  const std::string end = std::string(kWriteIdPrefix.substr(0, kWriteIdPrefix.size() - 1)) + "0";
  Status bad;
  KVGOV_RETURN_IF_ERROR(store_->Scan(
      store::Column::kMeta, kWriteIdPrefix, end, [&](std::string_view key, std::string_view value) {
        Result<StreamId> id = ParseStreamId(value);
        if (!id.ok()) {
          bad = id.status().WithContext("stored write id " + std::string(key));
          return false;
        }
        loaded.emplace_back(*id, std::string(key.substr(kWriteIdPrefix.size())));
        return true;
      }));
  KVGOV_RETURN_IF_ERROR(bad);
  std::sort(loaded.begin(), loaded.end());
  write_ids_.clear();
  write_id_order_.clear();
  for (auto& [id, write_id] : loaded) {
    write_ids_.emplace(write_id, id);
    write_id_order_.emplace_back(id, std::move(write_id));
  }
  return Status::Ok();
}

Status Replica::Skip(const LogEntry& entry, const Status& why) {
  // Its writer learns why instead of a row (before the cursor moves and
  // wakes it), and a retry of the same write gets the same answer.
  KVGOV_ASSIGN_OR_RETURN(StreamId id, ParseStreamId(entry.id));
  std::vector<store::WriteOp> ops = WriteIdOps(entry, id);
  ops.push_back({store::Column::kMeta, std::string(kCursorKey), entry.id});
  KVGOV_RETURN_IF_ERROR(store_->Write(ops, /*sync=*/true));
  RememberWriteId(entry, id);
  SettleOwn(entry, id, why);
  {
    MutexLock lock(mu_);
    if (applied_ < id) applied_ = id;
  }
  applied_cv_.notify_all();
  return Status::Ok();
}

Status Replica::Apply(const LogEntry& entry) {
  KVGOV_ASSIGN_OR_RETURN(StreamId id, ParseStreamId(entry.id));
  if (!entry.write_id.empty() && write_ids_.contains(entry.write_id)) {
    // The same write appended again (its first reply was lost): applied
    // once; its writer already has the first one's result.
    duplicates_.fetch_add(1);
    return AdvanceCursor(entry.id);
  }
  const journal::Attribution by{entry.actor, entry.origin};
  if (!entry.kind.empty()) {
    KVGOV_RETURN_IF_ERROR(journal::CheckRowFits(entry.kind, entry.subject, by, entry.payload));
  }
  if (hooks_.guard) {
    const Status verdict = hooks_.guard(entry);
    if (IsLocalFailure(verdict)) return verdict.WithContext("guard");
    if (!verdict.ok()) {
      refused_.fetch_add(1);
      log::Line(log::Level::kInfo, "replica.entry_refused")
          .Field("replica", options_.replica_id)
          .Field("entry", entry.id)
          .Field("kind", entry.kind)
          .Field("subject", entry.subject)
          .Field("error", verdict.ToString());
      return Skip(entry, verdict);
    }
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
  for (store::WriteOp& op : WriteIdOps(entry, id)) ops.push_back(std::move(op));
  ops.push_back(store::WriteOp{store::Column::kMeta, std::string(kCursorKey), entry.id});
  journal::Row row;
  if (entry.kind.empty()) {
    KVGOV_RETURN_IF_ERROR(store_->Write(ops, /*sync=*/true));
  } else {
    KVGOV_ASSIGN_OR_RETURN(
        row, journal_->Append(entry.kind, entry.subject, by, entry.payload, entry.time_ms, ops));
  }
  RememberWriteId(entry, id);
  if (hooks_.apply) hooks_.apply(entry);
  SettleOwn(entry, id, std::move(row));
  {
    MutexLock lock(mu_);
    applied_ = id;
  }
  applied_cv_.notify_all();
  return Status::Ok();
}

Result<bool> Replica::MissedHistory() {
  KVGOV_ASSIGN_OR_RETURN(std::optional<StreamId> trimmed, log_.TrimmedBelow());
  if (!trimmed.has_value()) return false;
  MutexLock lock(mu_);
  // Entries older than the mark are gone; this replica needs every entry
  // after its applied id, so any entry below the mark that it has not
  // applied may be one of them.
  return applied_ < *trimmed;
}

Status Replica::InstallSnapshot() {
  KVGOV_ASSIGN_OR_RETURN(std::optional<GovernanceSnapshot> found, snapshots_.Get());
  KVGOV_ASSIGN_OR_RETURN(std::optional<StreamId> trimmed, log_.TrimmedBelow());
  if (!found.has_value()) {
    return Status::Unavailable("the log was trimmed past this replica's applied id " +
                               applied_id() + " but no snapshot is in Redis");
  }
  const GovernanceSnapshot& snapshot = *found;
  KVGOV_ASSIGN_OR_RETURN(StreamId at, ParseStreamId(snapshot.id));
  // The housekeeper trims below its snapshot only: one older than the mark
  // cannot bridge the hole (a stale housekeeper's): wait for the next.
  if (trimmed.has_value() && at < *trimmed) {
    return Status::Unavailable("snapshot " + snapshot.id + " is older than the trim mark " +
                               trimmed->ToString());
  }
  // Tokens first: idempotent, and a crash before the cursor moves repeats
  // the whole install.
  std::set<std::string, std::less<>> token_names;
  for (const auto& [name, record] : snapshot.tokens) {
    KVGOV_RETURN_IF_ERROR(ApplyTokenWrite(options_.token_path, LogWrite{"tokens", name, record}));
    token_names.insert(name);
  }
  KVGOV_ASSIGN_OR_RETURN(std::vector<auth::TokenRecord> local,
                         auth::LoadTokenFile(options_.token_path));
  for (const auth::TokenRecord& token : local) {
    if (!token_names.contains(token.name)) {
      KVGOV_RETURN_IF_ERROR(
          ApplyTokenWrite(options_.token_path, LogWrite{"tokens", token.name, std::nullopt}));
    }
  }

  // The governance column becomes the snapshot's: what it lacks is erased.
  LogEntry as_entry;
  as_entry.id = snapshot.id;
  std::set<std::string, std::less<>> kept;
  for (const auto& [key, value] : snapshot.governance) kept.insert(key);
  KVGOV_RETURN_IF_ERROR(
      store_->Scan(store::Column::kGovernance, "", "", [&](std::string_view key, std::string_view) {
        if (!kept.contains(key)) {
          as_entry.writes.push_back({"governance", std::string(key), std::nullopt});
        }
        return true;
      }));
  for (const auto& [key, value] : snapshot.governance) {
    as_entry.writes.push_back({"governance", key, value});
  }
  std::vector<store::WriteOp> ops;
  ops.reserve(as_entry.writes.size() + write_ids_.size() + snapshot.write_ids.size() + 1);
  for (const LogWrite& write : as_entry.writes) {
    ops.push_back({store::Column::kGovernance, write.key, write.value});
  }
  for (const auto& [write_id, unused] : write_ids_) {
    ops.push_back({store::Column::kMeta, std::string(kWriteIdPrefix) + write_id, std::nullopt});
  }
  for (const auto& [write_id, first] : snapshot.write_ids) {
    KVGOV_RETURN_IF_ERROR(ParseStreamId(first).status().WithContext("snapshot write id"));
    ops.push_back({store::Column::kMeta, std::string(kWriteIdPrefix) + write_id, first});
  }
  ops.push_back({store::Column::kMeta, std::string(kCursorKey), snapshot.id});
  KVGOV_RETURN_IF_ERROR(journal_->AdoptHead(snapshot.journal_seq, snapshot.journal_hash,
                                            "snapshot " + snapshot.id, ops));
  KVGOV_RETURN_IF_ERROR(LoadWriteIds());
  if (hooks_.apply) hooks_.apply(as_entry);
  snapshot_installs_.fetch_add(1);  // before the applied id tells anyone it is done
  {
    MutexLock lock(mu_);
    if (applied_ < at) applied_ = at;
  }
  applied_cv_.notify_all();
  (void)applied_board_.Publish(at);  // holds the next trim back at once
  log::Line(log::Level::kWarn, "replica.snapshot_installed")
      .Field("replica", options_.replica_id)
      .Field("snapshot", snapshot.id)
      .Field("journal_seq", snapshot.journal_seq)
      .Field("records", snapshot.governance.size())
      .Field("detail",
             "the log was trimmed past this replica while it was away; the journal "
             "rows it missed are on every other replica");
  return Status::Ok();
}

Result<GovernanceSnapshot> Replica::TakeSnapshot() {
  GovernanceSnapshot snapshot;
  snapshot.id = applied_id();
  snapshot.journal_seq = journal_->head_seq();
  snapshot.journal_hash = journal_->head_hash();
  KVGOV_RETURN_IF_ERROR(store_->Scan(store::Column::kGovernance, "", "",
                                     [&](std::string_view key, std::string_view value) {
                                       snapshot.governance.emplace_back(key, value);
                                       return true;
                                     }));
  KVGOV_ASSIGN_OR_RETURN(std::vector<auth::TokenRecord> tokens,
                         auth::LoadTokenFile(options_.token_path));
  for (const auth::TokenRecord& token : tokens) {
    snapshot.tokens.emplace_back(token.name, auth::EncodeTokenRecord(token));
  }
  for (const auto& [at, write_id] : write_id_order_) {
    snapshot.write_ids.emplace_back(write_id, at.ToString());
  }
  return snapshot;
}

void Replica::MaybeSnapshotAndTrim() {
  if (!housekeeper_.load() || std::chrono::steady_clock::now() < next_snapshot_) return;
  next_snapshot_ = std::chrono::steady_clock::now() + options_.snapshot_interval;
  const StreamId at = *ParseStreamId(applied_id());
  if (at != snapshot_taken_) {
    // On the applier thread, between entries: the state is the state as of
    // the applied id exactly. Nothing applied since the last: nothing to take.
    Result<GovernanceSnapshot> snapshot = TakeSnapshot();
    if (!snapshot.ok()) {
      log::Line(log::Level::kError, "replica.snapshot_failed")
          .Field("replica", options_.replica_id)
          .Field("error", snapshot.status().ToString());
      return;
    }
    if (Status put = snapshots_.Put(*snapshot); !put.ok()) {
      log::Line(log::Level::kWarn, "replica.snapshot_failed")
          .Field("replica", options_.replica_id)
          .Field("error", put.ToString());
      return;
    }
    snapshot_taken_ = at;
  }
  // Below the slowest live replica and the snapshot, less the margin: a
  // live replica never finds a hole, an absent one bridges it with the
  // snapshot.
  (void)applied_board_.Publish(at);
  Result<std::optional<StreamId>> lowest = applied_board_.Lowest();
  if (!lowest.ok()) return;
  const StreamId bound = lowest->has_value() ? std::min(**lowest, at) : at;
  const auto retain = static_cast<uint64_t>(options_.log_retain.count());
  if (bound.ms <= retain) return;
  const StreamId below{bound.ms - retain, 0};
  Result<bool> trimmed = log_.TrimBelow(below);
  if (!trimmed.ok()) {
    log::Line(log::Level::kWarn, "replica.trim_failed")
        .Field("replica", options_.replica_id)
        .Field("error", trimmed.status().ToString());
  }
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
      KeepReplicaId();
      if (fatal_.load()) return;
      (void)CheckLogIdentity();  // a log lost while nothing is written
      Result<bool> held = claims_.Acquire("housekeeper", options_.replica_id, options_.claim_ttl);
      housekeeper_.store(held.ok() && *held);
      (void)applied_board_.Publish(*ParseStreamId(applied_id()));
    }
  }
}

bool Replica::CheckLogIdentity() {
  std::string known;
  {
    MutexLock lock(mu_);
    known = log_identity_;
  }
  if (known.empty()) {
    // The first meeting with this log (a new replica, or one from before
    // logs had identities): adopt it, or give a new log its identity.
    Result<std::string> candidate = auth::RandomHexId();
    if (!candidate.ok()) return false;
    Result<std::string> identity = log_.EnsureIdentity(*candidate);
    if (!identity.ok()) return false;
    const store::WriteOp remember{store::Column::kMeta, std::string(kLogIdentityKey), *identity};
    if (!store_->Write({&remember, 1}, /*sync=*/true).ok()) return false;
    MutexLock lock(mu_);
    log_identity_ = *identity;
    return true;
  }
  Result<std::optional<std::string>> identity = log_.Identity();
  if (!identity.ok()) return false;  // Redis away: no news of the log
  const bool same = identity->has_value() && **identity == known;
  if (!same && !log_reset_.exchange(true)) {
    log::Line(log::Level::kError, "replica.log_reset")
        .Field("replica", id())
        .Field("detail", LogResetError().message());
  } else if (same && log_reset_.exchange(false)) {
    log::Line(log::Level::kInfo, "replica.log_restored").Field("replica", id());
  }
  return same;
}

Status Replica::LogResetError() const {
  return Status::Unavailable(
      "the governance log on Redis is not the one replica '" + id() +
      "' followed (Redis lost its data, or was replaced): governance writes are refused and "
      "the replica is not ready; restore Redis from its backup, or start every replica on a "
      "fresh data dir");
}

void Replica::KeepReplicaId() {
  // Acquire, not Renew: a claim that lapsed while this process was paused
  // or Redis was away is taken back, unless another process has it now.
  Result<bool> held = claims_.Acquire(IdClaim(id()), instance_, options_.claim_ttl);
  if (!held.ok() || *held) return;  // Redis away: renewed when it returns
  if (fatal_.exchange(true)) return;
  housekeeper_.store(false);
  const Status lost = Status::FailedPrecondition(
      "replica id '" + id() +
      "' was taken by another kvgov while this one could not renew it "
      "(paused, or cut off from Redis, for longer than --claim-ttl-ms); this process stops "
      "serving as that replica");
  log::Line(log::Level::kError, "replica.id_lost")
      .Field("replica", id())
      .Field("error", lost.ToString());
  if (hooks_.fatal) hooks_.fatal(lost);
}

}  // namespace kvgov::replication

#pragma once

// Journals the token changes a single node finds in its token file
// (docs/formats/tokens.md, "The journal"). Replicas need none of this:
// their token changes arrive as governance log entries, which are
// journaled rows already.

#include <cstdint>
#include <map>
#include <string>

#include "kvgov/auth/tokens.h"
#include "kvgov/core/status.h"
#include "kvgov/services/governance_recorder.h"
#include "kvgov/store/store.h"

namespace kvgov::services {

/// Compares the tokens in force with the set the journal last recorded
/// (kept in the governance column under kJournaledTokensKey) and appends a
/// token.revoke and/or token.add row for each name that differs, each row
/// with the recorded set it leaves in the same synced write. So a change
/// made while kvgov was down is journaled at the next start, and a crash
/// between two rows journals the rest at the next start.
///
/// Thread-compatible: called at start, then from the housekeeping thread
/// only.
class TokenAudit {
 public:
  static constexpr std::string_view kJournaledTokensKey = "tokens/journaled";
  /// The journal's actor for a change found in the token file: kvgov cannot
  /// tell who edited it (the file's owner can).
  static constexpr std::string_view kActor = "token-file";
  /// What the set records of a token: the row's payload, and a fingerprint
  /// of its secret's hash (the first 16 hex of its SHA-256: a change of
  /// secret shows, nothing of it is revealed), which no row carries.
  struct Recorded {
    std::string payload;
    std::string secret_fingerprint;
    friend bool operator==(const Recorded&, const Recorded&) = default;
  };
  using TokenSet = std::map<std::string, Recorded, std::less<>>;

  /// Loads the recorded set from `store`. Corruption when it does not
  /// decode. The collaborators must outlive the audit.
  static Result<TokenAudit> Load(auth::Authenticator* auth, const store::Store* store,
                                 GovernanceRecorder* recorder);

  /// Journals what changed since the last call (cheap when nothing did).
  /// The first audit of a data dir journals the tokens it finds as
  /// token.baseline rows.
  Status CatchUp();
  /// CatchUp, for a timer that retries: a failure is logged
  /// (tokens.journal_failed) once until it succeeds again.
  void CatchUpOrLog();

 private:
  TokenAudit(auth::Authenticator* auth, GovernanceRecorder* recorder)
      : auth_(auth), recorder_(recorder) {}

  // One row, with the set it leaves recorded in the same write.
  Status JournalChange(std::string_view kind, std::string_view name, const std::string& payload,
                       const TokenSet& after);

  auth::Authenticator* auth_;
  GovernanceRecorder* recorder_;
  TokenSet journaled_;
  bool first_audit_ = false;  // no set was ever journaled in this data dir
  uint64_t seen_generation_ = UINT64_MAX;
  bool failing_ = false;
};

}  // namespace kvgov::services

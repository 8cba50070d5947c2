#pragma once

// Bearer tokens with roles (docs/formats/tokens.md): the token file the
// `kvgov token` commands manage, and the Authenticator the daemon checks
// every call with.

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/core/mutex.h"
#include "kvgov/core/status.h"

namespace kvgov::auth {

enum class Role : uint8_t { kIngest, kRoute, kAdmin, kRead, kInfer };

/// A role as people and files spell it, and what it lets a token call.
struct RoleInfo {
  Role role;
  std::string_view name;    // in tokens.json and `kvgov token add --role`
  std::string_view grants;  // a short list of the routes it opens, for help texts
};

/// Every role, in the order kvgov lists them: the one place they are
/// spelled, so help texts and messages list them from here rather than
/// repeating the list. Static storage; never empty.
std::span<const RoleInfo> Roles();

/// Every role's name, for messages: "ingest, route, admin, read or infer".
std::string RoleNames();

/// A role by its name; InvalidArgument naming every spelling (RoleNames).
Result<Role> ParseRole(std::string_view role);
std::string_view ToString(Role role);

struct TokenRecord {
  std::string name;
  std::vector<Role> roles;  // non-empty, no repeats
  std::string tenant;       // "": fleet-wide
  std::string sha256;       // lowercase hex SHA-256 of the secret
  int64_t created_ms = 0;

  bool HasRole(Role role) const;
  friend bool operator==(const TokenRecord&, const TokenRecord&) = default;
};

/// <data_dir>/tokens.json.
std::string TokenFilePath(std::string_view data_dir);

/// A tenant name: at most 128 bytes of printable ASCII without spaces.
/// InvalidArgument ("tenant: ...") otherwise.
Status CheckTenant(std::string_view tenant);

/// Reads the token file strictly. A missing file is no tokens; anything
/// malformed is InvalidArgument naming the path and field
/// ("tokens.json: $.tokens[1].roles[0]: ..."); over 1 MiB is
/// ResourceExhausted.
Result<std::vector<TokenRecord>> LoadTokenFile(const std::string& path);

/// Creates a token and returns its secret, the only time it exists in the
/// clear. Under the file's lock: InvalidArgument for a bad name, no role, a
/// bad tenant or a tenant-bound ingest token; AlreadyExists for a name in
/// use; IOError when the file cannot be written.
Result<std::string> AddToken(const std::string& path, std::string_view name,
                             std::vector<Role> roles, std::string_view tenant, int64_t now_ms);

/// Removes the named token. NotFound when there is none.
Status RevokeToken(const std::string& path, std::string_view name);

/// A new token's record (its hash only) and its secret, written nowhere:
/// for a caller that stores the record elsewhere first (the replicated
/// governance log). The same checks and errors as AddToken's.
struct MintedToken {
  TokenRecord record;
  std::string secret;
};
Result<MintedToken> MintToken(std::string_view name, std::vector<Role> roles,
                              std::string_view tenant, int64_t now_ms);

/// Inserts `record`, or replaces the token of the same name: how a replica
/// applies a token the governance log carries.
Status PutTokenRecord(const std::string& path, const TokenRecord& record);

/// One record as the token file spells it (docs/formats/tokens.md), and
/// back; DecodeTokenRecord checks it as LoadTokenFile does ("$.roles[0]:
/// ...").
std::string EncodeTokenRecord(const TokenRecord& record);
Result<TokenRecord> DecodeTokenRecord(std::string_view text);

/// What the journal says of a token (a token.add or token.revoke row's
/// payload): {"name", "roles", "tenant", "created_ms"} for a record, or
/// only the name; never the secret's hash.
std::string DescribeTokenChange(std::string_view name, const TokenRecord* record);

/// Who is calling, once authorized.
struct Principal {
  std::string token;   // the token's name; "" when authentication is off
  std::string tenant;  // "": fleet-wide
};

/// Fits a governance, route or gateway request to the caller: a fleet-wide
/// caller may name any tenant; a tenant-bound one only its own, and an
/// absent tenant becomes its own. `names_span_by_tokens` false (a span
/// named by engine block hash, or a worker/model scope) could reach other
/// tenants' blocks, so a tenant-bound caller is refused. PermissionDenied
/// names the binding.
Status FitToCaller(const Principal& caller, bool names_span_by_tokens, std::string& tenant);

/// Checks Authorization headers against the token file, reloading it when
/// it changes. Authentication is required when the file holds a token or
/// when `always_required` (kvgov listens beyond loopback).
///
/// Thread-safe: one mutex guards the loaded records; the presented token is
/// hashed outside it.
class Authenticator {
 public:
  Authenticator(std::string path, bool always_required);

  /// Loads the file; the daemon refuses to start on an error.
  Status Load();

  size_t token_count() const;
  bool required() const;
  /// True when some token is bound to `tenant`.
  bool NamesTenant(std::string_view tenant) const;

  /// The principal behind `authorization` (the header's value) for a call
  /// that needs `role`: Unauthenticated without a bearer token or for one
  /// that matches no record, PermissionDenied for a token without the role.
  Result<Principal> Authorize(std::string_view authorization, Role role);

  /// Rereads the file if it changed and a recheck is due, as Authorize
  /// does: for a caller that must see changes while no call comes in.
  void Refresh();

  /// The tokens in force, and a number that grows with every reload that
  /// changed them, so a watcher compares numbers, not records.
  std::vector<TokenRecord> Records() const;
  uint64_t generation() const;

 private:
  struct FileStamp {
    uint64_t inode = 0;
    int64_t size = -1;
    int64_t mtime_ns = 0;
    friend bool operator==(const FileStamp&, const FileStamp&) = default;
  };
  void RefreshLocked() KVGOV_REQUIRES(mu_);

  const std::string path_;
  const bool always_required_;
  mutable Mutex mu_;
  std::vector<TokenRecord> records_ KVGOV_GUARDED_BY(mu_);
  FileStamp stamp_ KVGOV_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point next_check_ KVGOV_GUARDED_BY(mu_){};
  bool reported_reload_error_ KVGOV_GUARDED_BY(mu_) = false;
  uint64_t generation_ KVGOV_GUARDED_BY(mu_) = 0;
};

}  // namespace kvgov::auth

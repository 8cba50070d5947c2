#include "kvgov/auth/tokens.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <set>

#include "json/bounded_json.h"
#include "kvgov/core/digest.h"
#include "kvgov/log/log.h"

namespace kvgov::auth {
namespace {

using json_internal::ChildPath;
using json_internal::IndexPath;
using json_internal::Json;
using json_internal::PathError;

constexpr size_t kMaxFileBytes = size_t{1} << 20;
constexpr std::string_view kSecretPrefix = "kvgov_";
constexpr auto kRecheckEvery = std::chrono::milliseconds(250);

// The one place roles are spelled (docs/formats/tokens.md, "Roles"): the
// token file, --role, help texts and error messages all come from here.
constexpr RoleInfo kRoles[] = {
    {Role::kIngest, "ingest", "POST /v1/events"},
    {Role::kRoute, "route", "POST /v1/route and its /done and /prefilled"},
    {Role::kAdmin, "admin", "quarantines, invalidations, drain, GET /v1/config"},
    {Role::kRead, "read", "the other GET routes of the control API and /metrics"},
    {Role::kInfer, "infer", "the gateway (--gateway-listen): the OpenAI API"},
};

Status CheckName(std::string_view name) {
  if (name.empty() || name.size() > 64) return Status::InvalidArgument("name: want 1-64 bytes");
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-')) {
      return Status::InvalidArgument("name: only A-Z, a-z, 0-9, '_', '.' and '-' are allowed");
    }
  }
  return Status::Ok();
}

Status CheckRecord(const TokenRecord& record) {
  KVGOV_RETURN_IF_ERROR(CheckName(record.name));
  KVGOV_RETURN_IF_ERROR(CheckTenant(record.tenant));
  if (record.roles.empty()) return Status::InvalidArgument("roles: at least one role is needed");
  std::set<Role> seen(record.roles.begin(), record.roles.end());
  if (seen.size() != record.roles.size()) return Status::InvalidArgument("roles: a role repeats");
  if (!record.tenant.empty() && record.HasRole(Role::kIngest)) {
    return Status::InvalidArgument(
        "roles: an ingest token cannot be bound to a tenant (engines and transports report for "
        "the whole fleet)");
  }
  return Status::Ok();
}

bool IsLowerHex(std::string_view text, size_t length) {
  return text.size() == length && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

Result<TokenRecord> DecodeRecord(const Json& value, const std::string& path) {
  if (!value.is_object()) return PathError(path, "want an object");
  static const std::set<std::string> kFields = {"name", "roles", "tenant", "sha256", "created_ms"};
  for (const auto& [key, unused] : value.items()) {
    if (!kFields.contains(key)) return PathError(ChildPath(path, key), "unknown field");
  }
  for (const std::string& field : kFields) {
    if (!value.contains(field)) return PathError(ChildPath(path, field), "required");
  }
  TokenRecord record;
  if (!value["name"].is_string()) return PathError(ChildPath(path, "name"), "want a string");
  record.name = value["name"].get<std::string>();
  if (!value["tenant"].is_string()) return PathError(ChildPath(path, "tenant"), "want a string");
  record.tenant = value["tenant"].get<std::string>();
  const Json& roles = value["roles"];
  if (!roles.is_array()) return PathError(ChildPath(path, "roles"), "want an array");
  for (size_t i = 0; i < roles.size(); ++i) {
    const std::string role_path = IndexPath(ChildPath(path, "roles"), i);
    if (!roles[i].is_string()) return PathError(role_path, "want a string");
    Result<Role> role = ParseRole(roles[i].get<std::string>());
    if (!role.ok()) return PathError(role_path, role.status().message());
    record.roles.push_back(*role);
  }
  if (!value["sha256"].is_string() || !IsLowerHex(value["sha256"].get<std::string>(), 64)) {
    return PathError(ChildPath(path, "sha256"), "want 64 lowercase hex digits");
  }
  record.sha256 = value["sha256"].get<std::string>();
  if (!value["created_ms"].is_number_integer()) {
    return PathError(ChildPath(path, "created_ms"), "want an integer");
  }
  record.created_ms = value["created_ms"].get<int64_t>();
  if (Status checked = CheckRecord(record); !checked.ok()) {
    return PathError(path, checked.message());
  }
  return record;
}

Result<std::vector<TokenRecord>> DecodeFile(std::string_view text) {
  json_internal::ParseLimits limits;
  limits.max_bytes = kMaxFileBytes;
  limits.noun = "token file";
  KVGOV_ASSIGN_OR_RETURN(Json document, json_internal::ParseJson(text, limits));
  if (!document.is_object()) return PathError("$", "want an object");
  for (const auto& [key, unused] : document.items()) {
    if (key != "version" && key != "tokens") return PathError(ChildPath("$", key), "unknown field");
  }
  if (!document.contains("version") || document["version"] != 1) {
    return PathError("$.version", "want 1");
  }
  if (!document.contains("tokens") || !document["tokens"].is_array()) {
    return PathError("$.tokens", "want an array");
  }
  std::vector<TokenRecord> records;
  std::set<std::string> names;
  for (size_t i = 0; i < document["tokens"].size(); ++i) {
    const std::string path = IndexPath("$.tokens", i);
    KVGOV_ASSIGN_OR_RETURN(TokenRecord record, DecodeRecord(document["tokens"][i], path));
    if (!names.insert(record.name).second) {
      return PathError(ChildPath(path, "name"), "repeats an earlier token's name");
    }
    records.push_back(std::move(record));
  }
  return records;
}

Json RecordJson(const TokenRecord& record) {
  Json roles = Json::array();
  for (Role role : record.roles) roles.push_back(std::string(ToString(role)));
  return {{"name", record.name},
          {"roles", std::move(roles)},
          {"tenant", record.tenant},
          {"sha256", record.sha256},
          {"created_ms", record.created_ms}};
}

std::string EncodeFile(std::span<const TokenRecord> records) {
  Json tokens = Json::array();
  for (const TokenRecord& record : records) tokens.push_back(RecordJson(record));
  return Json{{"version", 1}, {"tokens", std::move(tokens)}}.dump(1) + "\n";
}

std::string Errno(std::string_view what, const std::string& path) {
  return std::string(what) + " " + path + ": " + std::strerror(errno);
}

// Writes the whole file beside the old one and renames it into place, so a
// reader sees the old tokens or the new ones, never half a file.
Status SaveFile(const std::string& path, std::span<const TokenRecord> records) {
  const std::string text = EncodeFile(records);
  const std::string temp = path + ".tmp";
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IOError(Errno("cannot create", temp));
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Status error = Status::IOError(Errno("cannot write", temp));
      ::close(fd);
      return error;
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) return Status::IOError(Errno("cannot sync", temp));
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    return Status::IOError(Errno("cannot rename onto", path));
  }
  return Status::Ok();
}

Result<std::string> ReadFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::string();
    return Status::IOError(Errno("cannot open", path));
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    ::close(fd);
    return Status::IOError(Errno("cannot stat", path));
  }
  if (static_cast<uint64_t>(info.st_size) > kMaxFileBytes) {
    ::close(fd);
    return Status::ResourceExhausted(path + ": larger than 1 MiB");
  }
  std::string text(static_cast<size_t>(info.st_size), '\0');
  size_t read_bytes = 0;
  while (read_bytes < text.size()) {
    const ssize_t n = ::read(fd, text.data() + read_bytes, text.size() - read_bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    read_bytes += static_cast<size_t>(n);
  }
  ::close(fd);
  text.resize(read_bytes);
  return text;
}

// An exclusive lock on <dir>/tokens.lock for a read-modify-write of the file.
class FileLock {
 public:
  static Result<FileLock> Acquire(const std::string& token_path) {
    const std::string path = token_path.substr(0, token_path.rfind('/') + 1) + "tokens.lock";
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return Status::IOError(Errno("cannot open", path));
    while (::flock(fd, LOCK_EX) != 0) {
      if (errno != EINTR) {
        const Status error = Status::IOError(Errno("cannot lock", path));
        ::close(fd);
        return error;
      }
    }
    return FileLock(fd);
  }
  FileLock(FileLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileLock& operator=(FileLock&&) = delete;
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_;
};

Result<std::vector<TokenRecord>> LoadLocked(const std::string& path) {
  KVGOV_ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  if (text.empty()) return std::vector<TokenRecord>();
  Result<std::vector<TokenRecord>> records = DecodeFile(text);
  if (!records.ok()) {
    return records.status().WithContext(path);
  }
  return records;
}

}  // namespace

Status CheckTenant(std::string_view tenant) {
  if (tenant.size() > 128) return Status::InvalidArgument("tenant: longer than 128 bytes");
  for (char c : tenant) {
    if (c < 0x21 || c > 0x7e) {
      return Status::InvalidArgument("tenant: only printable ASCII without spaces is allowed");
    }
  }
  return Status::Ok();
}

std::span<const RoleInfo> Roles() { return kRoles; }

std::string RoleNames() {
  std::string names;
  for (size_t i = 0; i < std::size(kRoles); ++i) {
    if (i > 0) names += i + 1 == std::size(kRoles) ? " or " : ", ";
    names += kRoles[i].name;
  }
  return names;
}

Result<Role> ParseRole(std::string_view role) {
  for (const RoleInfo& info : kRoles) {
    if (info.name == role) return info.role;
  }
  return Status::InvalidArgument("unknown role \"" + std::string(role.substr(0, 32)) + "\": want " +
                                 RoleNames());
}

std::string_view ToString(Role role) {
  for (const RoleInfo& info : kRoles) {
    if (info.role == role) return info.name;
  }
  return "unknown";
}

bool TokenRecord::HasRole(Role role) const {
  return std::find(roles.begin(), roles.end(), role) != roles.end();
}

std::string TokenFilePath(std::string_view data_dir) {
  return std::string(data_dir) + "/tokens.json";
}

Result<std::vector<TokenRecord>> LoadTokenFile(const std::string& path) { return LoadLocked(path); }

Result<MintedToken> MintToken(std::string_view name, std::vector<Role> roles,
                              std::string_view tenant, int64_t now_ms) {
  MintedToken minted;
  TokenRecord& record = minted.record;
  record.name = std::string(name);
  record.roles = std::move(roles);
  record.tenant = std::string(tenant);
  record.created_ms = now_ms;
  KVGOV_RETURN_IF_ERROR(CheckRecord(record));
  if (sodium_init() < 0) return Status::Internal("libsodium failed to initialise");
  unsigned char bytes[32];
  randombytes_buf(bytes, sizeof(bytes));
  char hex[2 * sizeof(bytes) + 1];
  sodium_bin2hex(hex, sizeof(hex), bytes, sizeof(bytes));
  sodium_memzero(bytes, sizeof(bytes));
  minted.secret = std::string(kSecretPrefix) + hex;
  sodium_memzero(hex, sizeof(hex));
  record.sha256 = Sha256Hex(minted.secret);
  return minted;
}

Result<std::string> AddToken(const std::string& path, std::string_view name,
                             std::vector<Role> roles, std::string_view tenant, int64_t now_ms) {
  KVGOV_ASSIGN_OR_RETURN(MintedToken minted, MintToken(name, std::move(roles), tenant, now_ms));
  KVGOV_ASSIGN_OR_RETURN(FileLock lock, FileLock::Acquire(path));
  KVGOV_ASSIGN_OR_RETURN(std::vector<TokenRecord> records, LoadLocked(path));
  for (const TokenRecord& existing : records) {
    if (existing.name == minted.record.name) {
      return Status::AlreadyExists("a token named '" + minted.record.name +
                                   "' exists; revoke it first");
    }
  }
  records.push_back(std::move(minted.record));
  KVGOV_RETURN_IF_ERROR(SaveFile(path, records));
  return std::move(minted.secret);
}

Status PutTokenRecord(const std::string& path, const TokenRecord& record) {
  KVGOV_RETURN_IF_ERROR(CheckRecord(record));
  KVGOV_ASSIGN_OR_RETURN(FileLock lock, FileLock::Acquire(path));
  KVGOV_ASSIGN_OR_RETURN(std::vector<TokenRecord> records, LoadLocked(path));
  const auto it = std::find_if(records.begin(), records.end(),
                               [&](const TokenRecord& r) { return r.name == record.name; });
  if (it == records.end()) {
    records.push_back(record);
  } else {
    *it = record;
  }
  return SaveFile(path, records);
}

std::string EncodeTokenRecord(const TokenRecord& record) { return RecordJson(record).dump(); }

std::string DescribeTokenChange(std::string_view name, const TokenRecord* record) {
  if (record == nullptr) return Json{{"name", name}}.dump();
  Json described = RecordJson(*record);
  described.erase("sha256");
  return described.dump();
}

Result<TokenRecord> DecodeTokenRecord(std::string_view text) {
  json_internal::ParseLimits limits;
  limits.max_bytes = size_t{64} * 1024;
  limits.noun = "token record";
  KVGOV_ASSIGN_OR_RETURN(Json value, json_internal::ParseJson(text, limits));
  return DecodeRecord(value, "$");
}

Status RevokeToken(const std::string& path, std::string_view name) {
  KVGOV_ASSIGN_OR_RETURN(FileLock lock, FileLock::Acquire(path));
  KVGOV_ASSIGN_OR_RETURN(std::vector<TokenRecord> records, LoadLocked(path));
  const auto it = std::find_if(records.begin(), records.end(),
                               [&](const TokenRecord& record) { return record.name == name; });
  if (it == records.end()) {
    return Status::NotFound("no token named '" + std::string(name.substr(0, 64)) + "'");
  }
  records.erase(it);
  return SaveFile(path, records);
}

Authenticator::Authenticator(std::string path, bool always_required)
    : path_(std::move(path)), always_required_(always_required) {}

Status Authenticator::Load() {
  KVGOV_ASSIGN_OR_RETURN(std::vector<TokenRecord> records, LoadTokenFile(path_));
  MutexLock lock(mu_);
  records_ = std::move(records);
  next_check_ = std::chrono::steady_clock::now() + kRecheckEvery;
  struct stat info {};
  if (::stat(path_.c_str(), &info) == 0) {
    stamp_ = {static_cast<uint64_t>(info.st_ino), static_cast<int64_t>(info.st_size),
              static_cast<int64_t>(info.st_mtim.tv_sec) * 1000000000 + info.st_mtim.tv_nsec};
  }
  return Status::Ok();
}

bool Authenticator::NamesTenant(std::string_view tenant) const {
  MutexLock lock(mu_);
  return std::any_of(records_.begin(), records_.end(),
                     [tenant](const TokenRecord& record) { return record.tenant == tenant; });
}

size_t Authenticator::token_count() const {
  MutexLock lock(mu_);
  return records_.size();
}

bool Authenticator::required() const {
  MutexLock lock(mu_);
  return always_required_ || !records_.empty();
}

void Authenticator::RefreshLocked() {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_check_) return;
  next_check_ = now + kRecheckEvery;
  FileStamp stamp;
  struct stat info {};
  if (::stat(path_.c_str(), &info) == 0) {
    stamp = {static_cast<uint64_t>(info.st_ino), static_cast<int64_t>(info.st_size),
             static_cast<int64_t>(info.st_mtim.tv_sec) * 1000000000 + info.st_mtim.tv_nsec};
  }
  if (stamp == stamp_) return;
  Result<std::vector<TokenRecord>> records = LoadTokenFile(path_);
  if (!records.ok()) {
    // Keep the tokens in force: a half-edited file must neither lock every
    // caller out nor let anyone in.
    if (!reported_reload_error_) {
      log::Line(log::Level::kError, "tokens.reload_failed")
          .Field("file", path_)
          .Field("error", records.status().ToString())
          .Field("kept", static_cast<uint64_t>(records_.size()));
      reported_reload_error_ = true;
    }
    return;
  }
  reported_reload_error_ = false;
  if (*records != records_) ++generation_;
  records_ = std::move(records).value();
  stamp_ = stamp;
  // A count, never a secret (Load, at start, says nothing: recovery does).
  log::Line(log::Level::kInfo, "tokens.reload")
      .Field("file", path_)
      .Field("tokens", static_cast<uint64_t>(records_.size()));
}

void Authenticator::Refresh() {
  MutexLock lock(mu_);
  RefreshLocked();
}

std::vector<TokenRecord> Authenticator::Records() const {
  MutexLock lock(mu_);
  return records_;
}

uint64_t Authenticator::generation() const {
  MutexLock lock(mu_);
  return generation_;
}

Result<Principal> Authenticator::Authorize(std::string_view authorization, Role role) {
  std::string presented_digest;
  {
    // The scheme is case-insensitive (RFC 9110); the token is not.
    constexpr std::string_view kScheme = "bearer ";
    if (authorization.size() > kScheme.size() &&
        std::equal(kScheme.begin(), kScheme.end(), authorization.begin(), [](char a, char b) {
          return a == std::tolower(static_cast<unsigned char>(b));
        })) {
      presented_digest = Sha256Hex(authorization.substr(kScheme.size()));
    }
  }
  MutexLock lock(mu_);
  RefreshLocked();
  if (!always_required_ && records_.empty()) return Principal{};
  if (presented_digest.empty()) {
    return Status::Unauthenticated("missing bearer token: send 'Authorization: Bearer kvgov_...'");
  }
  // Every record is compared, matched or not, in constant time each.
  const TokenRecord* match = nullptr;
  for (const TokenRecord& record : records_) {
    if (record.sha256.size() == presented_digest.size() &&
        sodium_memcmp(record.sha256.data(), presented_digest.data(), presented_digest.size()) ==
            0) {
      match = &record;
    }
  }
  if (match == nullptr) return Status::Unauthenticated("unknown or revoked token");
  if (!match->HasRole(role)) {
    return Status::PermissionDenied("token '" + match->name + "' lacks the " +
                                    std::string(ToString(role)) + " role");
  }
  return Principal{match->name, match->tenant};
}

Status FitToCaller(const Principal& caller, bool names_span_by_tokens, std::string& tenant) {
  if (caller.tenant.empty()) return Status::Ok();
  if (!names_span_by_tokens) {
    return Status::PermissionDenied("token '" + caller.token + "' is bound to tenant '" +
                                    caller.tenant +
                                    "': name the span by token_ids, not by engine block or scope");
  }
  if (tenant.empty()) {
    tenant = caller.tenant;
  } else if (tenant != caller.tenant) {
    return Status::PermissionDenied("token '" + caller.token + "' is bound to tenant '" +
                                    caller.tenant + "', not '" + tenant.substr(0, 128) + "'");
  }
  return Status::Ok();
}

}  // namespace kvgov::auth

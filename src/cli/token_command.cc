#include "cli/token_command.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kvgov/auth/tokens.h"
#include "kvgov/core/digest.h"
#include "kvgov/log/log.h"
#include "kvgov/replication/governance_log.h"
#include "kvgov/replication/replica.h"
#include "cli/redis_password.h"

namespace kvgov::cli {
namespace {

int64_t NowMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int Fail(const char* what, const Status& status) {
  std::fprintf(stderr, "kvgov token %s: %s\n", what, status.message().c_str());
  return status.code() == StatusCode::kInvalidArgument ? 2 : 1;
}

constexpr const char* kDataDirHelp =
    "kvgov's data dir; the token file is DIR/tokens.json. Default: ./kvgov-data\n"
    "in the current directory, as for kvgov serve. Not with --redis.";

// --role's help, from the one list of roles (auth::Roles()).
std::string RoleHelp() {
  std::string help = "What the token may call; repeatable:";
  for (const auth::RoleInfo& info : auth::Roles()) {
    const size_t pad = info.name.size() < 8 ? 8 - info.name.size() : 1;
    help += "\n  " + std::string(info.name) + std::string(pad, ' ') + std::string(info.grants);
  }
  return help;
}

}  // namespace

CLI::App* AddTokenCommand(CLI::App& app, TokenFlags& flags) {
  CLI::App* token = app.add_subcommand(
      "token",
      "Manage the bearer tokens kvgov serve accepts (docs/formats/tokens.md). Changes take\n"
      "effect in a running kvgov within 250 ms.");
  token->require_subcommand(1);
  flags.data_dir_options.push_back(
      token->add_option("--data-dir", flags.data_dir, kDataDirHelp)->capture_default_str());

  flags.add = token->add_subcommand(
      "add",
      "Create a token and print its secret, once, alone on the last line; only its SHA-256 is\n"
      "stored, in the data dir the output names. Example:\n"
      "kvgov token add app --role infer --data-dir /var/lib/kvgov");
  flags.add->add_option("NAME", flags.name, "1-64 of A-Z a-z 0-9 _ . -")->required();
  flags.add->add_option("--role", flags.roles, RoleHelp())->required();
  flags.add->add_option("--tenant", flags.tenant,
                        "Bind the token to one tenant: it routes, reads and governs only that\n"
                        "tenant's spans.");

  flags.list = token->add_subcommand("list", "List tokens: name, roles, tenant, creation time.");

  flags.revoke = token->add_subcommand("revoke", "Delete a token; it stops working at once.");
  flags.revoke->add_option("NAME", flags.name, "The token's name.")->required();

  flags.import = token->add_subcommand(
      "import",
      "Add the tokens of a token file (docs/formats/tokens.md: names, roles, tenants and the\n"
      "secrets' hashes; no secret) that are missing, and replace those that differ; tokens\n"
      "not in the file are kept. Idempotent, and safe to run from several places at once:\n"
      "made for an init container that declares a fleet's tokens from a Secret. Example:\n"
      "kvgov token import /etc/kvgov/tokens/tokens.json --redis redis://kvgov-redis:6379");
  flags.import
      ->add_option("FILE", flags.import_file,
                   "A tokens.json, e.g. made with kvgov token "
                   "add --data-dir on another machine.")
      ->required();
  for (CLI::App* command : {flags.add, flags.list, flags.revoke, flags.import}) {
    flags.data_dir_options.push_back(
        command->add_option("--data-dir", flags.data_dir, kDataDirHelp)->capture_default_str());
  }
  flags.add->add_option("--redis", flags.redis_url,
                        "Write to the replicas' governance log on this Redis instead of a data\n"
                        "dir: every replica (kvgov serve --redis) applies it within a second.");
  flags.revoke->add_option("--redis", flags.redis_url,
                           "Revoke through the replicas' governance log on this Redis instead of\n"
                           "a data dir: every replica applies it within a second.");
  flags.list->add_option("--redis", flags.redis_url,
                         "List the tokens the replicas' governance log on this Redis holds (its\n"
                         "snapshot and the entries after it) instead of a data dir's.");
  flags.import->add_option("--redis", flags.redis_url,
                           "Import into the replicas' governance log on this Redis instead of a\n"
                           "data dir: every replica applies it within a second.");
  for (CLI::App* command : {flags.add, flags.list, flags.revoke, flags.import}) {
    command->add_option("--redis-password-file", flags.redis_password_file, kRedisPasswordFileHelp);
    command->add_option("--redis-prefix", flags.redis_prefix, "The replicas' --redis-prefix.")
        ->capture_default_str();
  }
  return token;
}

namespace {

// The journal's actor for a change made with this command: the OS user
// who ran it (docs/formats/journal.md §2).
std::string CliActor() {
  const passwd* user = ::getpwuid(::geteuid());
  return "cli:" + (user != nullptr && user->pw_name != nullptr
                       ? std::string(user->pw_name)
                       : "uid" + std::to_string(::geteuid()));
}

// A token change for the replicas: one governance log entry whose "tokens"
// write each replica puts into its own token file
// (docs/formats/governance-log.md). The journal row names the token, never
// its hash.
// `write_id` "" draws a random one; a replica applies an entry whose write
// id it has seen once only.
Status AppendTokenChange(const TokenFlags& flags, std::string_view kind, const std::string& name,
                         std::optional<auth::TokenRecord> record, std::string write_id = "") {
  replication::LogEntry entry;
  entry.origin = "kvgov-token";
  entry.kind = std::string(kind);
  entry.subject = name;
  entry.time_ms = NowMillis();
  entry.actor = CliActor();
  entry.write_id = std::move(write_id);
  entry.payload = auth::DescribeTokenChange(name, record ? &*record : nullptr);
  entry.writes.push_back(replication::LogWrite{
      "tokens", name,
      record ? std::optional<std::string>(auth::EncodeTokenRecord(*record)) : std::nullopt});
  return replication::Replica::AppendOnce(flags.redis_url, flags.redis_prefix, entry).status();
}

}  // namespace

namespace {

void PrintTokens(const std::vector<auth::TokenRecord>& records) {
  std::printf("%-24s %-28s %-20s %s\n", "NAME", "ROLES", "TENANT", "CREATED");
  for (const auth::TokenRecord& record : records) {
    std::string roles;
    for (auth::Role role : record.roles) {
      roles += (roles.empty() ? "" : ",") + std::string(auth::ToString(role));
    }
    std::printf("%-24s %-28s %-20s %s\n", record.name.c_str(), roles.c_str(),
                record.tenant.empty() ? "(fleet)" : record.tenant.c_str(),
                log::IsoUtc(record.created_ms).c_str());
  }
}

// The data dir as the reader should find it again: absolute, since the
// default is relative to wherever the command ran.
std::string AbsoluteDir(const std::string& dir) {
  std::error_code error;
  const std::filesystem::path absolute = std::filesystem::absolute(dir, error);
  return error ? dir : absolute.lexically_normal().string();
}

bool DataDirGiven(const TokenFlags& flags) {
  for (const CLI::Option* option : flags.data_dir_options) {
    if (option != nullptr && option->count() > 0) return true;
  }
  return false;
}

// What importing a record does to the tokens in force.
enum class ImportStep { kAdd, kReplace, kKeep };

ImportStep StepFor(const auth::TokenRecord& wanted,
                   const std::vector<auth::TokenRecord>& in_force) {
  const auto same_name =
      std::find_if(in_force.begin(), in_force.end(),
                   [&](const auth::TokenRecord& r) { return r.name == wanted.name; });
  if (same_name == in_force.end()) return ImportStep::kAdd;
  auto sorted_roles = [](std::vector<auth::Role> roles) {
    std::sort(roles.begin(), roles.end());
    return roles;
  };
  // created_ms is when a token was made, not what it grants: a record that
  // differs only there is the same token.
  const bool same = same_name->sha256 == wanted.sha256 && same_name->tenant == wanted.tenant &&
                    sorted_roles(same_name->roles) == sorted_roles(wanted.roles);
  return same ? ImportStep::kKeep : ImportStep::kReplace;
}

int RunImport(const TokenFlags& flags) {
  if (std::error_code error; !std::filesystem::is_regular_file(flags.import_file, error)) {
    return Fail("import", Status::NotFound("no token file '" + flags.import_file + "'"));
  }
  Result<std::vector<auth::TokenRecord>> wanted = auth::LoadTokenFile(flags.import_file);
  if (!wanted.ok()) return Fail("import", wanted.status());
  if (wanted->empty()) {
    return Fail("import", Status::InvalidArgument("'" + flags.import_file +
                                                  "' holds no token: nothing to import"));
  }
  const bool replicated = !flags.redis_url.empty();
  const std::string path = auth::TokenFilePath(flags.data_dir);
  std::vector<auth::TokenRecord> in_force;
  replication::ReplicatedTokens log_view;
  if (replicated) {
    Result<replication::ReplicatedTokens> read =
        replication::Replica::ReadTokens(flags.redis_url, flags.redis_prefix);
    if (!read.ok()) return Fail("import", read.status());
    log_view = std::move(*read);
    in_force = log_view.tokens;
  } else {
    std::error_code made;
    std::filesystem::create_directories(flags.data_dir, made);
    if (made || ::chmod(flags.data_dir.c_str(), 0700) != 0) {
      return Fail("import", Status::IOError("cannot create data dir " + flags.data_dir));
    }
    Result<std::vector<auth::TokenRecord>> read = auth::LoadTokenFile(path);
    if (!read.ok()) return Fail("import", read.status());
    in_force = std::move(*read);
  }
  int added = 0, replaced = 0, kept = 0;
  for (const auth::TokenRecord& record : *wanted) {
    const ImportStep step = StepFor(record, in_force);
    if (step == ImportStep::kKeep) {
      ++kept;
      std::printf("unchanged %s\n", record.name.c_str());
      continue;
    }
    Status done;
    if (replicated) {
      // The write id names this change of this token from the state the
      // import saw it in: importers that saw the same state (init
      // containers of replicas starting together, however their reads and
      // appends interleave) append the same id, which every replica
      // applies once; after a later revoke the state, and the id, differ.
      const std::string write_id =
          "token-import-" +
          Sha256Hex(log_view.ChangedAt(record.name) + "\n" + auth::EncodeTokenRecord(record))
              .substr(0, 40);
      done = AppendTokenChange(flags, "token.add", record.name, record, write_id);
    } else {
      done = auth::PutTokenRecord(path, record);
    }
    if (!done.ok()) return Fail("import", done.WithContext("token '" + record.name + "'"));
    ++(step == ImportStep::kAdd ? added : replaced);
    std::printf("%s %s\n", step == ImportStep::kAdd ? "added" : "replaced", record.name.c_str());
  }
  const std::string place =
      replicated ? "the replicas' governance log" : AbsoluteDir(flags.data_dir) + "/tokens.json";
  std::printf("imported %s into %s: %d added, %d replaced, %d unchanged\n",
              flags.import_file.c_str(), place.c_str(), added, replaced, kept);
  return 0;
}

}  // namespace

int RunToken(const TokenFlags& given) {
  TokenFlags flags = given;
  const char* command = flags.add->parsed()      ? "add"
                        : flags.revoke->parsed() ? "revoke"
                        : flags.import->parsed() ? "import"
                                                 : "list";
  const bool data_dir_given = DataDirGiven(flags);
  if (!flags.redis_url.empty() && data_dir_given) {
    // Both name a place for the tokens; silently preferring one would leave
    // the operator believing the other was changed (or read).
    const char* why = flags.list->parsed()
                          ? "--redis lists the tokens of the replicas' governance log, not of a "
                            "data dir"
                          : "--redis writes the change to the replicas' governance log, and every "
                            "replica puts it into its own data dir";
    std::fprintf(stderr,
                 "kvgov token %s: --redis and --data-dir do not go together: %s. Drop --data-dir "
                 "for a replicated fleet (kvgov serve --redis), or drop --redis to use one data "
                 "dir's tokens.json (a single kvgov).\n",
                 command, why);
    return 2;
  }
  if (!flags.redis_password_file.empty()) {
    Result<std::string> url = WithRedisPasswordFile(flags.redis_url, flags.redis_password_file);
    if (!url.ok()) return Fail(command, url.status());
    flags.redis_url = *std::move(url);
  }
  if (flags.import->parsed()) return RunImport(flags);
  const std::string path = auth::TokenFilePath(flags.data_dir);
  if (flags.add->parsed() && !flags.redis_url.empty()) {
    std::vector<auth::Role> roles;
    for (const std::string& spelling : flags.roles) {
      Result<auth::Role> role = auth::ParseRole(spelling);
      if (!role.ok()) return Fail("add", role.status());
      roles.push_back(*role);
    }
    Result<auth::MintedToken> minted =
        auth::MintToken(flags.name, roles, flags.tenant, NowMillis());
    if (!minted.ok()) return Fail("add", minted.status());
    if (Status appended = AppendTokenChange(flags, "token.add", flags.name, minted->record);
        !appended.ok()) {
      return Fail("add", appended);
    }
    std::printf("created token '%s' for the replicas; its secret is shown once, below:\n%s\n",
                flags.name.c_str(), minted->secret.c_str());
    return 0;
  }
  if (flags.revoke->parsed() && !flags.redis_url.empty()) {
    if (Status appended = AppendTokenChange(flags, "token.revoke", flags.name, std::nullopt);
        !appended.ok()) {
      return Fail("revoke", appended);
    }
    std::printf("revoked token '%s' on the replicas\n", flags.name.c_str());
    return 0;
  }
  if (flags.list->parsed() && !flags.redis_url.empty()) {
    Result<replication::ReplicatedTokens> read =
        replication::Replica::ReadTokens(flags.redis_url, flags.redis_prefix);
    if (!read.ok()) return Fail("list", read.status());
    PrintTokens(read->tokens);
    return 0;
  }
  if (flags.add->parsed()) {
    // Tokens may be created before kvgov first starts; the dir holds
    // secrets, so it is the owner's alone, as kvgov serve makes it.
    std::error_code made;
    std::filesystem::create_directories(flags.data_dir, made);
    if (made || ::chmod(flags.data_dir.c_str(), 0700) != 0) {
      return Fail("add", Status::IOError("cannot create data dir " + flags.data_dir));
    }
    std::vector<auth::Role> roles;
    for (const std::string& spelling : flags.roles) {
      Result<auth::Role> role = auth::ParseRole(spelling);
      if (!role.ok()) return Fail("add", role.status());
      roles.push_back(*role);
    }
    Result<std::string> secret = auth::AddToken(path, flags.name, roles, flags.tenant, NowMillis());
    if (!secret.ok()) return Fail("add", secret.status());
    // Where it went, named in full (the default is relative to wherever
    // this ran): kvgov serve must use the same data dir to accept it. The
    // secret stays alone on the last line.
    if (!data_dir_given) {
      std::printf(
          "no --data-dir given: using the default, %s (%s); kvgov serve must run with "
          "the same data dir to accept this token\n",
          flags.data_dir.c_str(), AbsoluteDir(flags.data_dir).c_str());
    }
    std::printf("created token '%s' in %s/tokens.json; its secret is shown once, below:\n%s\n",
                flags.name.c_str(), AbsoluteDir(flags.data_dir).c_str(), secret->c_str());
    return 0;
  }
  // A missing token file is "no tokens" to the daemon, but a missing data
  // dir is most likely a mistyped --data-dir: an empty table would hide it.
  if (std::error_code error; !std::filesystem::is_directory(flags.data_dir, error)) {
    return Fail(command,
                Status::NotFound("no data dir '" + flags.data_dir + "' (give kvgov's --data-dir)"));
  }
  if (flags.revoke->parsed()) {
    if (Status revoked = auth::RevokeToken(path, flags.name); !revoked.ok()) {
      return Fail("revoke", revoked);
    }
    std::printf("revoked token '%s' in %s/tokens.json\n", flags.name.c_str(),
                AbsoluteDir(flags.data_dir).c_str());
    return 0;
  }
  Result<std::vector<auth::TokenRecord>> records = auth::LoadTokenFile(path);
  if (!records.ok()) return Fail("list", records.status());
  PrintTokens(*records);
  return 0;
}

}  // namespace kvgov::cli

#include "kvgov/auth/tokens.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "testing/scratch_dir.h"

namespace kvgov::auth {
namespace {

class TokensTest : public ::testing::Test {
 protected:
  void SetUp() override { path_ = TokenFilePath(dir_.string()); }

  std::string Add(const std::string& name, std::vector<Role> roles,
                  const std::string& tenant = "") {
    Result<std::string> secret = AddToken(path_, name, std::move(roles), tenant, 1000);
    EXPECT_TRUE(secret.ok()) << secret.status().ToString();
    return secret.ok() ? *secret : "";
  }

  void WriteFile(const std::string& text) { std::ofstream(path_) << text; }

  test_support::ScratchDir dir_{"kvgov_tokens_test"};
  std::string path_;
};

TEST_F(TokensTest, AddStoresOnlyTheHashInAnOwnerOnlyFile) {
  const std::string secret = Add("gateway", {Role::kRoute, Role::kRead});
  ASSERT_EQ(secret.rfind("kvgov_", 0), 0u);
  EXPECT_EQ(secret.size(), 6u + 64u);
  std::ifstream file(path_);
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.find(secret.substr(6)), std::string::npos);
  struct stat info {};
  ASSERT_EQ(::stat(path_.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);

  Result<std::vector<TokenRecord>> records = LoadTokenFile(path_);
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  ASSERT_EQ(records->size(), 1u);
  EXPECT_EQ((*records)[0].name, "gateway");
  EXPECT_EQ((*records)[0].roles, (std::vector<Role>{Role::kRoute, Role::kRead}));
  EXPECT_EQ((*records)[0].created_ms, 1000);
  EXPECT_NE(Add("other", {Role::kRead}), secret);  // fresh randomness each time
}

TEST_F(TokensTest, AddRefusesBadRequestsWithTheReason) {
  Add("gateway", {Role::kRoute});
  EXPECT_EQ(AddToken(path_, "gateway", {Role::kRead}, "", 1).status().code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(AddToken(path_, "bad name", {Role::kRead}, "", 1).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(AddToken(path_, "none", {}, "", 1).status().code(), StatusCode::kInvalidArgument);
  Result<std::string> ingest = AddToken(path_, "engine", {Role::kIngest}, "tenant-a", 1);
  ASSERT_FALSE(ingest.ok());
  EXPECT_NE(ingest.status().message().find("cannot be bound to a tenant"), std::string::npos);
  EXPECT_EQ(ParseRole("root").status().code(), StatusCode::kInvalidArgument);
}

// Roles are spelled in one place: every role round-trips, and the refusal
// of an unknown one names every role, the gateway's `infer` included (issue
// 43: the message once stopped at `read`).
TEST(RolesTest, EveryRoleRoundTripsAndTheRefusalNamesThemAll) {
  std::set<Role> seen;
  for (const RoleInfo& info : Roles()) {
    Result<Role> parsed = ParseRole(info.name);
    ASSERT_TRUE(parsed.ok()) << info.name;
    EXPECT_EQ(*parsed, info.role);
    EXPECT_EQ(ToString(info.role), info.name);
    EXPECT_FALSE(info.grants.empty()) << info.name;
    EXPECT_TRUE(seen.insert(info.role).second) << info.name << " is listed twice";
  }
  // Every enumerator is listed (kInfer is the last).
  EXPECT_EQ(seen.size(), static_cast<size_t>(Role::kInfer) + 1);
  EXPECT_EQ(RoleNames(), "ingest, route, admin, read or infer");

  Result<Role> unknown = ParseRole("root");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  for (const RoleInfo& info : Roles()) {
    EXPECT_NE(unknown.status().message().find(std::string(info.name)), std::string::npos)
        << unknown.status().message() << " does not name " << info.name;
  }
}

TEST_F(TokensTest, RevokeRemovesOnlyTheNamedToken) {
  Add("a", {Role::kRead});
  Add("b", {Role::kRead});
  ASSERT_TRUE(RevokeToken(path_, "a").ok());
  EXPECT_EQ(RevokeToken(path_, "a").code(), StatusCode::kNotFound);
  Result<std::vector<TokenRecord>> records = LoadTokenFile(path_);
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), 1u);
  EXPECT_EQ((*records)[0].name, "b");
}

// How a replica applies a token the governance log carries: minted
// elsewhere, put here as a record, the secret never stored.
TEST_F(TokensTest, MintedRecordsRoundTripAndPutInsertsOrReplaces) {
  Result<MintedToken> minted = MintToken("gateway", {Role::kRoute}, "tenant-a", 42);
  ASSERT_TRUE(minted.ok()) << minted.status().ToString();
  Result<TokenRecord> decoded = DecodeTokenRecord(EncodeTokenRecord(minted->record));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, minted->record);
  EXPECT_EQ(EncodeTokenRecord(minted->record).find(minted->secret.substr(6)), std::string::npos);

  ASSERT_TRUE(PutTokenRecord(path_, minted->record).ok());
  TokenRecord wider = minted->record;
  wider.roles.push_back(Role::kRead);
  ASSERT_TRUE(PutTokenRecord(path_, wider).ok());
  Result<std::vector<TokenRecord>> records = LoadTokenFile(path_);
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), 1u);
  EXPECT_EQ((*records)[0], wider);

  Result<TokenRecord> bad = DecodeTokenRecord(R"({"name":"x","roles":["root"],"tenant":"",)"
                                              R"("sha256":"00","created_ms":1})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("$.roles[0]"), std::string::npos)
      << bad.status().ToString();
  EXPECT_FALSE(MintToken("engine", {Role::kIngest}, "tenant-a", 1).ok());
}

TEST_F(TokensTest, AMalformedFileIsRefusedNamingTheField) {
  WriteFile(R"({"version":1,"tokens":[{"name":"a","roles":["root"],"tenant":"",)"
            R"("sha256":"00","created_ms":1}]})");
  Result<std::vector<TokenRecord>> records = LoadTokenFile(path_);
  ASSERT_FALSE(records.ok());
  EXPECT_NE(records.status().message().find("$.tokens[0].roles[0]"), std::string::npos)
      << records.status().message();
  WriteFile(R"({"version":2,"tokens":[]})");
  EXPECT_NE(LoadTokenFile(path_).status().message().find("$.version"), std::string::npos);
  WriteFile(R"({"version":1,"tokens":[],"admin":true})");
  EXPECT_NE(LoadTokenFile(path_).status().message().find("unknown field"), std::string::npos);
}

TEST_F(TokensTest, WithoutTokensOnLoopbackEveryCallPasses) {
  Authenticator open(path_, /*always_required=*/false);
  ASSERT_TRUE(open.Load().ok());
  EXPECT_FALSE(open.required());
  EXPECT_TRUE(open.Authorize("", Role::kAdmin).ok());

  // Beyond loopback, no token means no entry at all.
  Authenticator closed(path_, /*always_required=*/true);
  ASSERT_TRUE(closed.Load().ok());
  EXPECT_EQ(closed.Authorize("", Role::kRead).status().code(), StatusCode::kUnauthenticated);
}

TEST_F(TokensTest, AuthorizesByTokenAndRole) {
  const std::string reader = Add("reader", {Role::kRead});
  const std::string tenant = Add("tenant-a-router", {Role::kRoute}, "tenant-a");
  Authenticator authenticator(path_, false);
  ASSERT_TRUE(authenticator.Load().ok());
  EXPECT_TRUE(authenticator.required());

  Result<Principal> ok = authenticator.Authorize("Bearer " + reader, Role::kRead);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->token, "reader");
  EXPECT_TRUE(ok->tenant.empty());
  EXPECT_TRUE(authenticator.Authorize("bearer " + reader, Role::kRead).ok());  // any case
  EXPECT_EQ(authenticator.Authorize("", Role::kRead).status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(authenticator.Authorize("Basic " + reader, Role::kRead).status().code(),
            StatusCode::kUnauthenticated);
  Result<Principal> wrong = authenticator.Authorize("Bearer " + reader + "x", Role::kRead);
  EXPECT_EQ(wrong.status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(wrong.status().message().find(reader), std::string::npos);  // never echoed
  Result<Principal> lacking = authenticator.Authorize("Bearer " + reader, Role::kAdmin);
  EXPECT_EQ(lacking.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(lacking.status().message().find("lacks the admin role"), std::string::npos);

  Result<Principal> bound = authenticator.Authorize("Bearer " + tenant, Role::kRoute);
  ASSERT_TRUE(bound.ok());
  EXPECT_EQ(bound->tenant, "tenant-a");
}

TEST_F(TokensTest, ARevokedTokenStopsWorkingWithoutARestart) {
  const std::string secret = Add("gateway", {Role::kRoute});
  Add("keeper", {Role::kRead});
  Authenticator authenticator(path_, false);
  ASSERT_TRUE(authenticator.Load().ok());
  ASSERT_TRUE(authenticator.Authorize("Bearer " + secret, Role::kRoute).ok());
  ASSERT_TRUE(RevokeToken(path_, "gateway").ok());
  // The file is re-checked at most every 250 ms: poll, do not sleep blind.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  Status status = Status::Ok();
  while (std::chrono::steady_clock::now() < deadline) {
    status = authenticator.Authorize("Bearer " + secret, Role::kRoute).status();
    if (!status.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(status.code(), StatusCode::kUnauthenticated);
}

TEST_F(TokensTest, ABrokenFileKeepsThePreviousTokens) {
  const std::string secret = Add("gateway", {Role::kRoute});
  Authenticator authenticator(path_, false);
  ASSERT_TRUE(authenticator.Load().ok());
  WriteFile("{ not json");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(600);
  while (std::chrono::steady_clock::now() < deadline) {
    ASSERT_TRUE(authenticator.Authorize("Bearer " + secret, Role::kRoute).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(authenticator.token_count(), 1u);
}

}  // namespace
}  // namespace kvgov::auth

// The route decision through the real ingest: a publisher stores a prefix,
// /v1/route sends the matching prompt there; and the tenant salt round trip
// (route, the engine stores with that salt, the next route matches).

#include <httplib.h>

#include <gtest/gtest.h>

#include <functional>
#include <msgpack.hpp>
#include <nlohmann/json.hpp>
#include <thread>

#include "e2e/daemon_process.h"
#include "e2e/fake_engine_publisher.h"
#include "e2e/tokens.h"
#include "e2e/wait.h"

namespace kvgov::testing {
namespace {

using Json = nlohmann::json;
using std::chrono::milliseconds;

constexpr int64_t kBlockSize = 4;

class RouteE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::string> args;
    for (auto* engine : {&w1_, &w2_}) {
      const std::string id = engine == &w1_ ? "w1" : "w2";
      args.push_back("--engine");
      args.push_back("id=" + id + ",events=" + engine->events_endpoint() +
                     ",replay=" + engine->replay_endpoint() +
                     ",model=llama,block-size=" + std::to_string(kBlockSize));
    }
    Status started = daemon_.Start(args);
    ASSERT_TRUE(started.ok()) << started.ToString();
    ASSERT_TRUE(w1_.WaitForSubscriber(milliseconds(20000)));
    ASSERT_TRUE(w2_.WaitForSubscriber(milliseconds(20000)));
    client_ = std::make_unique<httplib::Client>("127.0.0.1", daemon_.port());
  }

  Json Route(const std::string& body) {
    httplib::Result response = client_->Post("/v1/route", body, "application/json");
    EXPECT_TRUE(response);
    EXPECT_EQ(response->status, 200) << response->body;
    return Json::parse(response->body);
  }

  uint64_t HbmBlocks(const std::string& worker) {
    Json workers = Json::parse(client_->Get("/v1/workers")->body)["workers"];
    for (const Json& w : workers) {
      if (w["id"] == worker) return w["blocks"]["hbm"];
    }
    return 0;
  }

  FakeEnginePublisher w1_{kBlockSize};
  FakeEnginePublisher w2_{kBlockSize};
  DaemonProcess daemon_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(RouteE2ETest, MatchingPromptGoesWhereItsPrefixIs) {
  w2_.Store(std::nullopt, 3, 100);  // tokens 100..111 on w2
  ASSERT_TRUE(WaitFor([&] { return HbmBlocks("w2") == 3; })) << daemon_.Stderr();

  Json prompt = {{"model", "llama"}, {"token_ids", Tokens(16, 100)}};
  Json decision = Route(prompt.dump());
  EXPECT_EQ(decision["worker"], "w2");
  EXPECT_EQ(decision["overlap_blocks"], 3);
  EXPECT_EQ(decision["prompt_blocks"], 4);
  EXPECT_EQ(decision["candidates"][1]["worker"], "w1");
  EXPECT_EQ(decision["candidates"][1]["overlap_blocks"], 0);

  // An unrelated prompt has no overlap anywhere: both cost the same and the
  // tie goes to the smaller id, except that w2 now carries the first
  // decision's load.
  Json other = Route(Json({{"model", "llama"}, {"token_ids", Tokens(8, 900)}}).dump());
  EXPECT_EQ(other["worker"], "w1");
}

TEST_F(RouteE2ETest, TenantSaltRoundTrip) {
  // 1. Route for tenant acme: nothing cached yet; kvgov hands out the salt.
  Json first = Route(Json({{"model", "llama"},
                           {"tenant", "acme"},
                           {"token_ids", Tokens(8, 100)},
                           {"workers", {"w1"}}})
                         .dump());
  ASSERT_EQ(first["worker"], "w1");
  EXPECT_EQ(first["overlap_blocks"], 0);
  const std::string salt = first["cache_salt"];
  ASSERT_EQ(salt.size(), 32u);

  // 2. The caller attaches the salt to its engine request; vLLM mixes it
  //    into the first block's extra keys and publishes them.
  w1_.StoreSalted(Tokens(8, 100), salt);
  ASSERT_TRUE(WaitFor([&] { return HbmBlocks("w1") == 2; })) << daemon_.Stderr();

  // 3. The next route for acme matches; another tenant's does not, nor
  //    does a request without a tenant.
  Json again =
      Route(Json({{"model", "llama"}, {"tenant", "acme"}, {"token_ids", Tokens(8, 100)}}).dump());
  EXPECT_EQ(again["worker"], "w1") << again.dump();
  EXPECT_EQ(again["overlap_blocks"], 2);
  EXPECT_EQ(again["cache_salt"], salt);
  Json other = Route(
      Json({{"model", "llama"}, {"tenant", "umbrella"}, {"token_ids", Tokens(8, 100)}}).dump());
  EXPECT_EQ(other["overlap_blocks"], 0);
  Json anonymous = Route(Json({{"model", "llama"}, {"token_ids", Tokens(8, 100)}}).dump());
  EXPECT_EQ(anonymous["overlap_blocks"], 0);
}

}  // namespace
}  // namespace kvgov::testing

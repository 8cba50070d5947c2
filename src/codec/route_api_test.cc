#include "kvgov/codec/route_api.h"

#include <gtest/gtest.h>

namespace kvgov {
namespace {

TEST(RouteApiTest, DecodesAFullRequest) {
  Result<router::RouteRequest> request = DecodeRouteRequestJson(
      R"({"model":"llama","tenant":"acme","token_ids":[1,2,3],"lora_name":"ad",
          "workers":["w1","w2"]})",
      JsonLimits{});
  ASSERT_TRUE(request.ok()) << request.status().ToString();
  EXPECT_EQ(request->model, "llama");
  EXPECT_EQ(request->tenant, "acme");
  EXPECT_EQ(request->token_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(request->lora_name, "ad");
  EXPECT_EQ(request->workers, (std::vector<std::string>{"w1", "w2"}));
}

TEST(RouteApiTest, ErrorsNameTheField) {
  auto message = [](std::string_view body) {
    return DecodeRouteRequestJson(body, JsonLimits{}).status().message();
  };
  EXPECT_EQ(message(R"({"token_ids":[1]})"), "$.model: missing required field");
  EXPECT_EQ(message(R"({"model":"","token_ids":[1]})"), "$.model: required, got empty");
  EXPECT_EQ(message(R"({"model":"m"})"), "$.token_ids: missing required field");
  EXPECT_EQ(message(R"({"model":"m","token_ids":[1],"cache_salt":"x"})"),
            "$.cache_salt: unknown field");
  EXPECT_EQ(message(R"({"model":"m","token_ids":["a"]})").rfind("$.token_ids[0]: ", 0), 0u);
}

}  // namespace
}  // namespace kvgov

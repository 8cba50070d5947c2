#include "kvgov/core/status.h"

#include <gtest/gtest.h>

namespace kvgov {
namespace {

Result<int> ParsePositive(int value) {
  if (value <= 0) return Status::InvalidArgument("value: must be > 0");
  return value;
}

Result<int> Doubled(int value) {
  KVGOV_ASSIGN_OR_RETURN(int parsed, ParsePositive(value));
  return parsed * 2;
}

TEST(StatusTest, OkHasNoMessage) {
  Status status;
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(status.ToString(), "ok");
}

TEST(StatusTest, ErrorCarriesCodeAndMessage) {
  Status status = Status::NotFound("lease 'l1'");
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_EQ(status.ToString(), "not_found: lease 'l1'");
}

TEST(StatusTest, WithContextPrefixesErrorsAndKeepsOk) {
  EXPECT_EQ(Status::InvalidArgument("bad").WithContext("$.id").message(), "$.id: bad");
  EXPECT_TRUE(Status::Ok().WithContext("$.id").ok());
}

TEST(ResultTest, ValueOrError) {
  EXPECT_EQ(*Doubled(4), 8);
  Result<int> failed = Doubled(-1);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kInvalidArgument);
}

TEST(ResultTest, OkStatusIsNotAValue) {
  Result<int> result = Status::Ok();
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace kvgov

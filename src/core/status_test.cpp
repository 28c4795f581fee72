#include "core/status.h"

#include <gtest/gtest.h>

namespace lucid {
namespace {

StatusOr<int> ParsePositive(int x) {
  if (x <= 0) return InvalidArgument("not positive: " + std::to_string(x));
  return x;
}

Status UseTwice(int x, int* out) {
  LUCID_ASSIGN_OR_RETURN(int v, ParsePositive(x));
  LUCID_RETURN_IF_ERROR(v > 100 ? OutOfRange("too big") : OkStatus());
  *out = 2 * v;
  return OkStatus();
}

TEST(StatusTest, PropagatesErrorsAndValues) {
  int out = 0;
  EXPECT_TRUE(UseTwice(4, &out).ok());
  EXPECT_EQ(out, 8);
  Status s = UseTwice(-1, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.ToString(), "InvalidArgument: not positive: -1");
  EXPECT_EQ(UseTwice(101, &out).code(), StatusCode::kOutOfRange);
}

TEST(StatusTest, WithContextPrefixesMessage) {
  Status s = DataLoss("truncated").WithContext("model.safetensors");
  EXPECT_EQ(s.message(), "model.safetensors: truncated");
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(OkStatus().WithContext("x").ok());
}

TEST(StatusTest, StatusOrFromOkStatusIsAnError) {
  StatusOr<int> v = OkStatus();
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kInternal);
}

TEST(StatusDeathTest, ValueOfErrorAborts) {
  StatusOr<int> v = NotFound("x");
  EXPECT_DEATH((void)v.value(), "NotFound: x");
}

}  // namespace
}  // namespace lucid

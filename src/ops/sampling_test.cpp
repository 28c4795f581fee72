// RowSampling::forced_token: no draw, the token is the forced id whatever the other parameters,
// and its logprob is the raw row's log-softmax there (checked against a double-precision
// evaluation written here).
#include "ops/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace lucid {
namespace {

TEST(SamplingTest, AForcedTokenIsTakenAsIsAndGetsItsRawLogprob) {
  const std::vector<float> raw = {0.5f, -1.25f, 3.0f, 2.0f, -0.75f, 1.5f};
  double sum = 0.0;
  for (float v : raw) sum += std::exp(static_cast<double>(v));
  for (int32_t forced : {0, 1, 4}) {
    for (float t : {0.0f, 0.7f, 1.0f}) {
      RowSampling p;
      p.temperature = t;
      p.top_k = 1;  // would keep only id 2
      p.uniform = 0.99;
      p.forced_token = forced;
      std::vector<float> x = raw;
      EXPECT_EQ(PickToken(x, p), forced) << "temperature " << t;
      p.forced_token = -1;
      x = raw;
      EXPECT_EQ(PickToken(x, p), 2) << "temperature " << t;  // unforced: the top-1 id
    }
    float lp = 0.0f;
    int32_t top[2];
    float top_lp[2];
    RawRowLogprobs(raw, forced, 2, &lp, top, top_lp);
    EXPECT_NEAR(lp, raw[forced] - std::log(sum), 1e-6) << forced;
    EXPECT_EQ(top[0], 2);
    EXPECT_EQ(top[1], 3);
  }
}

}  // namespace
}  // namespace lucid

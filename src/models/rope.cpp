#include "models/rope.h"

#include <algorithm>
#include <cmath>

namespace lucid {
namespace {

double YarnMscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

double CorrectionDim(double rotations, int64_t dim, double base, double max_pos) {
  return (static_cast<double>(dim) * std::log(max_pos / (rotations * 2.0 * M_PI))) /
         (2.0 * std::log(base));
}

}  // namespace

RopeTable MakeRopeTable(const RopeConfig& rope, int64_t dim) {
  RopeTable t;
  const int64_t half = dim / 2;
  std::vector<float> pos_freq(half);
  for (int64_t i = 0; i < half; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(dim);
    pos_freq[i] = static_cast<float>(std::pow(rope.theta, static_cast<double>(expo)));
  }
  t.inv_freq.resize(half);
  if (rope.type == "llama3") {
    // transformers' _compute_llama3_parameters, in float32 as there.
    const float factor = static_cast<float>(rope.factor);
    const float low = static_cast<float>(rope.low_freq_factor);
    const float high = static_cast<float>(rope.high_freq_factor);
    const float old_ctx = static_cast<float>(rope.original_max_position_embeddings);
    const float low_wavelen = old_ctx / low, high_wavelen = old_ctx / high;
    for (int64_t i = 0; i < half; ++i) {
      const float inv = 1.0f / pos_freq[i];
      const float wavelen = 2.0f * static_cast<float>(M_PI) / inv;
      float v = wavelen > low_wavelen ? inv / factor : inv;
      if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        const float smooth = (old_ctx / wavelen - low) / (high - low);
        v = (1.0f - smooth) * v / factor + smooth * v;
      }
      t.inv_freq[i] = v;
    }
    t.attention_factor = 1.0f;
    return t;
  }
  if (rope.type != "yarn") {
    for (int64_t i = 0; i < half; ++i) t.inv_freq[i] = 1.0f / pos_freq[i];
    t.attention_factor = 1.0f;
    return t;
  }
  const double factor = rope.factor;
  double low = CorrectionDim(rope.beta_fast, dim, rope.theta,
                             static_cast<double>(rope.original_max_position_embeddings));
  double high = CorrectionDim(rope.beta_slow, dim, rope.theta,
                              static_cast<double>(rope.original_max_position_embeddings));
  if (rope.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  for (int64_t i = 0; i < half; ++i) {
    const float ramp = std::clamp(
        (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low), 0.0f,
        1.0f);
    const float extrap_factor = 1.0f - ramp;
    const float extrap = 1.0f / pos_freq[i];
    const float interp = 1.0f / (static_cast<float>(factor) * pos_freq[i]);
    t.inv_freq[i] = interp * (1.0f - extrap_factor) + extrap * extrap_factor;
  }
  double af = rope.attention_factor;
  if (af == 0.0) {
    af = (rope.mscale != 0.0 && rope.mscale_all_dim != 0.0)
             ? YarnMscale(factor, rope.mscale) / YarnMscale(factor, rope.mscale_all_dim)
             : YarnMscale(factor, 1.0);
  }
  t.attention_factor = static_cast<float>(af);
  return t;
}

}  // namespace lucid

// Conformance cases of SampleRows: a batch of rows, each with other parameters (greedy with and
// without edits, temperature alone, top_k, top_p, min_p, all three, the penalties' edits with the
// clamp, an overflowing bias, a repetition penalty on negative logits, a forced token), over logits
// with many exact ties (which the selections must rank by id) and over continuous ones, with and
// without top alternatives. The tokens and top ids must equal the reference's; the logprobs must
// lie within 1e-5 of them. ApplyTokenBitmask's cases are beside them.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/ops_conformance_internal.h"

namespace lucid::conformance {
namespace {

struct RowCase {
  RowSampling p;
  std::vector<LogitEdit> edits;
};

std::vector<RowCase> RowCases(int64_t V, uint64_t seed) {
  auto row = [](float t, int32_t k, float top_p, float min_p) {
    RowSampling p;
    p.temperature = t;
    p.top_k = k;
    p.top_p = top_p;
    p.min_p = min_p;
    return p;
  };
  const int32_t a = static_cast<int32_t>(V / 3), b = static_cast<int32_t>(V - 1);
  std::vector<RowCase> cases = {
      {row(0.0f, 0, 1.0f, 0.0f), {}},
      {row(0.0f, 0, 1.0f, 0.0f),
       {{a, LogitEditKind::kAdd, 2.5f},
        {a, LogitEditKind::kAdd, 0.25f},
        {0, LogitEditKind::kSuppress, 0.0f},
        {b, LogitEditKind::kSubtract, 1.5f}}},
      {row(0.7f, 0, 1.0f, 0.0f), {}},
      {row(1.0f, 5, 1.0f, 0.0f), {}},
      {row(1.3f, 0, 0.9f, 0.0f), {}},
      {row(1.0f, 50, 0.8f, 0.1f), {}},
      {row(0.9f, 0, 1.0f, 0.0f),
       {{0, LogitEditKind::kSuppress, 0.0f},
        {1, LogitEditKind::kRepetition, 1.3f},
        {a, LogitEditKind::kRepetition, 1.3f},
        {b, LogitEditKind::kRepetition, 1.3f},
        {a, LogitEditKind::kSubtract, 0.75f},
        {2, LogitEditKind::kSubtract, -3.0f}}},
      {row(1.0f, 0, 0.5f, 0.0f),  // a bias that overflows, clamped to the finite range
       {{a, LogitEditKind::kAdd, 3e38f},
        {a, LogitEditKind::kAdd, 3e38f},
        {b, LogitEditKind::kRepetition, 1.1f}}},
      {row(2.0f, 1, 1.0f, 0.0f), {}},
      {row(0.5f, 0, 1.0f, 0.9f), {}},
  };
  // Greedy over a row made negative where the repetition penalty decides the argmax: a
  // negative logit is multiplied by the penalty (here 0.01, towards 0), a positive one divided.
  cases.push_back({row(0.0f, 0, 1.0f, 0.0f), {}});
  for (int32_t i = 0; i < 7; ++i) cases.back().edits.push_back({i, LogitEditKind::kAdd, -10.0f});
  cases.back().edits.push_back({a, LogitEditKind::kRepetition, 0.01f});
  // Forced tokens (prompt logprobs): greedy and sampling parameters alike give the forced id.
  cases.push_back({row(0.0f, 0, 1.0f, 0.0f), {}});
  cases.back().p.forced_token = b;
  cases.push_back({row(1.0f, 5, 0.9f, 0.0f), {{b, LogitEditKind::kSuppress, 0.0f}}});
  cases.back().p.forced_token = a;
  cases[7].p.clamp = 1;
  cases[6].p.clamp = 1;
  for (size_t r = 0; r < cases.size(); ++r) cases[r].p.uniform = CounterUniform(seed, r);
  return cases;
}

void SampleRowsCases(Suite& s) {
  if (!s.Wants("SampleRows")) return;
  std::mt19937 rng(31);
  for (int64_t V : {int64_t{7}, int64_t{1000}, int64_t{50000}})
    for (bool ties : {true, false})
      for (int64_t K : {int64_t{0}, std::min<int64_t>(V, 3)}) {
        const std::vector<RowCase> cases = RowCases(V, static_cast<uint64_t>(V + 2 * K + ties));
        const int64_t R = static_cast<int64_t>(cases.size());
        std::vector<RowSampling> rows;
        std::vector<LogitEdit> edits;
        for (const RowCase& c : cases) {
          RowSampling p = c.p;
          p.edit_begin = static_cast<int32_t>(edits.size());
          for (const LogitEdit& e : c.edits)
            if (e.id < V) edits.push_back(e);
          p.edit_end = static_cast<int32_t>(edits.size());
          rows.push_back(p);
        }
        Tensor logits = F32({R, V});
        std::uniform_real_distribution<float> u(-6.0f, 6.0f);
        for (int64_t i = 0; i < R * V; ++i)  // ties: steps of 0.5, many exact repeats
          logits.data<float>()[i] = ties ? std::round(u(rng) * 2.0f) / 2.0f : u(rng);
        Tensor got_tok = Tensor::Zeros(DType::kI32, {R}), want_tok = got_tok.Clone();
        Tensor got_lp = F32({R, 1 + K}), want_lp = F32({R, 1 + K});
        Tensor got_top = Tensor::Zeros(DType::kI32, {R, K}), want_top = got_top.Clone();
        Tensor scratch = F32({R, V}), scratch2 = F32({R, V});
        s.cand().SampleRows(logits, rows, edits, scratch, got_tok, got_lp, got_top);
        s.ref().SampleRows(logits, rows, edits, scratch2, want_tok, want_lp, want_top);
        const std::string shape = Shape3("R", R, "V", V, "K", K) + (ties ? " ties" : "");
        const std::string format = "-";
        s.AddExact("SampleRows", format, shape + " tokens", Plant::kNone,
                   std::memcmp(got_tok.raw(), want_tok.raw(), got_tok.nbytes()) == 0);
        if (K > 0)
          s.AddExact("SampleRows", format, shape + " top ids", Plant::kNone,
                     std::memcmp(got_top.raw(), want_top.raw(), got_top.nbytes()) == 0);
        s.Add("SampleRows", format, shape + " logprobs", Plant::kNone, got_lp.data<float>(),
              want_lp.data<float>(), R * (1 + K), 1e-5);
      }
}

// Rows with every token allowed, none, random words, one token, and all but the last word's
// bits past V, over V that fills its last word and V that does not; logits random with a NaN or
// an infinity planted (a masked one becomes -inf, an allowed one stays). Exact.
void ApplyTokenBitmaskCases(Suite& s) {
  if (!s.Wants("ApplyTokenBitmask")) return;
  constexpr int64_t R = 5;
  for (int64_t V : {7, 64, 1000, 50001})
    for (Plant p : kPlants) {
      const int64_t W = (V + 31) / 32;
      Tensor x = RandomTensor({R, V}, static_cast<uint32_t>(V), -8.0f, 8.0f);
      for (int64_t row : {1, 2, 3}) PlantAt(x, p, row, V / 2);  // masked, either, allowed
      Tensor mask = Tensor::Zeros(DType::kI32, {R, W});
      int32_t* m = mask.data<int32_t>();
      std::mt19937 rng(static_cast<uint32_t>(V));
      for (int64_t w = 0; w < W; ++w) {
        m[w] = -1;                                   // row 0: every token
        m[2 * W + w] = static_cast<int32_t>(rng());  // row 2: random
        m[4 * W + w] = w + 1 < W ? -1 : 0x55555555;  // row 4: every other in the last word
      }
      m[3 * W + (V / 2) / 32] =
          static_cast<int32_t>(1u << ((V / 2) % 32));  // row 3: one; row 1: none
      Tensor y = x.Clone(), r = x.Clone();
      s.cand().ApplyTokenBitmask(y, mask);
      s.ref().ApplyTokenBitmask(r, mask);
      s.Add("ApplyTokenBitmask", "-", "R=5 V=" + std::to_string(V), p, y.data<float>(),
            r.data<float>(), y.numel(), 0.0);
    }
}

}  // namespace

void SamplingCases(Suite& s) {
  SampleRowsCases(s);
  ApplyTokenBitmaskCases(s);
}

}  // namespace lucid::conformance

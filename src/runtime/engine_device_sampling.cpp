// EngineCore's sampling where the logits are (a device backend): the non-finite scan and
// Ops::SampleRows run on the backend, and the host reads one flag per row, then the tokens and
// logprobs; a constrained request's grammar bitmask is uploaded and applied there
// (Ops::ApplyTokenBitmask), and prompt logprobs are SampleRows with the prompt token forced. Of
// the logits the host reads only the rows of requests that still collect prompt logits
// (HostLogitRows). The result equals the host path's (runtime/sampler.h) token
// for token: the same parameters and edits (RequestSampler::Plan) and the same arithmetic
// (ops/sampling.h).
#include <algorithm>
#include <vector>

#include "runtime/engine_core.h"
#include "runtime/engine_request.h"

namespace lucid {

bool EngineCore::NeedsHostLogits(const Request& r) {
  return r.generated == 0 && r.prompt_logits.raw() != nullptr;
}

StatusOr<std::vector<int32_t>> EngineCore::NonFiniteLogitRows(Backend& dev, const Tensor& logits) {
  const int64_t R = logits.size(0);
  if (R == 0) return std::vector<int32_t>();
  LUCID_ASSIGN_OR_RETURN(Tensor flags, Tensor::Allocate(DType::kI32, {R}, dev.workspace()));
  dev.ops().NonFiniteRows(logits, flags);
  LUCID_ASSIGN_OR_RETURN(Tensor host, dev.ReadableOnHost(flags));
  return std::vector<int32_t>(host.data<const int32_t>(), host.data<const int32_t>() + R);
}

StatusOr<Tensor> EngineCore::HostLogitRows(Backend& dev, const Tensor& logits,
                                           const std::vector<int64_t>& rows) {
  if (rows.empty()) return Tensor();
  if (static_cast<int64_t>(rows.size()) == logits.size(0)) return dev.ReadableOnHost(logits);
  LUCID_ASSIGN_OR_RETURN(
      Tensor picked,
      Tensor::Allocate(DType::kF32, {static_cast<int64_t>(rows.size()), logits.size(1)},
                       dev.workspace()));
  dev.ops().GatherRows(logits, rows, picked);
  return dev.ReadableOnHost(picked);
}

namespace {

// What Ops::SampleRows gave for the rows it was asked, read back to the host.
struct SampledRows {
  Tensor tokens;    // i32 [S]
  Tensor logprobs;  // f32 [S, 1 + K]
  Tensor top;       // i32 [S, K] (empty for K = 0)
};

// Ops::SampleRows over rows `picked_rows` of `logits` (device memory; gathered first unless they
// are every row in order), each with its RowSampling and edits, after the grammar bitmask `words`
// ([S, ceil(V / 32)], empty: none) is applied; K alternatives.
StatusOr<SampledRows> SampleRowsOnDevice(Backend& dev, const Tensor& logits,
                                         const std::vector<int64_t>& picked_rows,
                                         const std::vector<RowSampling>& rows,
                                         const std::vector<LogitEdit>& edits,
                                         const std::vector<int32_t>& words, int32_t K) {
  const int64_t V = logits.size(1), S = static_cast<int64_t>(picked_rows.size());
  const Ops& ops = dev.ops();
  Workspace& ws = dev.workspace();
  Tensor picked = logits;
  bool identity = S == logits.size(0);
  for (int64_t s = 0; identity && s < S; ++s) identity = picked_rows[s] == s;
  if (!identity) {
    LUCID_ASSIGN_OR_RETURN(picked, Tensor::Allocate(DType::kF32, {S, V}, ws));
    ops.GatherRows(logits, picked_rows, picked);
  }
  if (!words.empty())
    ops.ApplyTokenBitmask(picked, dev.StepCopy(words).Reshape({S, (V + 31) / 32}));
  LUCID_ASSIGN_OR_RETURN(Tensor scratch, Tensor::Allocate(DType::kF32, {S, V}, ws));
  LUCID_ASSIGN_OR_RETURN(Tensor tokens, Tensor::Allocate(DType::kI32, {S}, ws));
  LUCID_ASSIGN_OR_RETURN(Tensor lps, Tensor::Allocate(DType::kF32, {S, 1 + K}, ws));
  LUCID_ASSIGN_OR_RETURN(Tensor top, Tensor::Allocate(DType::kI32, {S, K}, ws));
  ops.SampleRows(picked, rows, edits, scratch, tokens, lps, top);
  SampledRows out;
  LUCID_ASSIGN_OR_RETURN(out.tokens, dev.ReadableOnHost(tokens));
  LUCID_ASSIGN_OR_RETURN(out.logprobs, dev.ReadableOnHost(lps));
  if (K > 0) {
    LUCID_ASSIGN_OR_RETURN(out.top, dev.ReadableOnHost(top));
  }
  return out;
}

// Sample s's logprobs: its token's, and its first `k` of the K alternatives.
TokenLogprob LogprobsOf(const SampledRows& r, int64_t s, int32_t K, int32_t k) {
  TokenLogprob lp;
  const float* l = r.logprobs.data<const float>() + s * (1 + K);
  lp.token = r.tokens.data<const int32_t>()[s];
  lp.logprob = l[0];
  for (int32_t j = 0; j < std::min(k, K); ++j)
    lp.top.emplace_back(r.top.data<const int32_t>()[s * K + j], l[1 + j]);
  return lp;
}

}  // namespace

void EngineCore::SampleOnDevice(Backend& dev, const Tensor& logits,
                                const std::vector<std::pair<uint64_t, int64_t>>& all_picks) {
  // A request failed earlier in the step (its prompt logprobs) is not sampled.
  std::vector<std::pair<uint64_t, int64_t>> picks;
  for (const auto& p : all_picks)
    if (requests_.count(p.first) > 0) picks.push_back(p);
  if (picks.empty()) return;
  const int64_t V = model_->config().vocab_size, S = static_cast<int64_t>(picks.size());
  std::vector<RowSampling> rows;
  std::vector<LogitEdit> edits;
  std::vector<int64_t> picked_rows;
  int32_t K = 0;
  for (const auto& [id, row] : picks) {
    const Request& r = *requests_.at(id);
    rows.push_back(r.sampler.Plan(r.generated, &edits));
    picked_rows.push_back(row);
    K = std::max(K, r.params.logprobs);
  }
  K = static_cast<int32_t>(std::min<int64_t>(K, V));
  // Constrained requests: their grammars' bitmasks, applied where the logits are (rows of the
  // others allow every token).
  const int64_t W = (V + 31) / 32;
  std::vector<int32_t> words;
  std::vector<BitmaskJob> jobs;
  for (int64_t s = 0; s < S; ++s) {
    const Request& r = *requests_.at(picks[s].first);
    if (r.matcher == nullptr) continue;
    if (words.empty()) words.assign(static_cast<size_t>(S * W), -1);
    jobs.push_back({r.matcher.get(), {words.data() + s * W, static_cast<size_t>(W)}, V});
  }
  if (!jobs.empty()) FillBitmasksInParallel(jobs);
  StatusOr<SampledRows> got = SampleRowsOnDevice(dev, logits, picked_rows, rows, edits, words, K);
  if (!got.ok()) {
    for (const auto& [id, row] : picks) Fail(id, got.status().WithContext("device sampling"));
    return;
  }
  for (int64_t s = 0; s < S; ++s) {
    auto it = requests_.find(picks[s].first);
    if (it == requests_.end()) continue;
    Request& r = *it->second;
    const int32_t token = got->tokens.data<const int32_t>()[s];
    r.sampler.Record(token);
    Emit(r, token,
         r.params.logprobs >= 0 ? LogprobsOf(*got, s, K, r.params.logprobs) : TokenLogprob{});
  }
}

void EngineCore::PromptLogprobsOnDevice(Backend& dev, const Tensor& logits,
                                        const std::vector<PromptLogprobJob>& jobs) {
  if (jobs.empty()) return;
  const int64_t V = model_->config().vocab_size, S = static_cast<int64_t>(jobs.size());
  std::vector<RowSampling> rows(static_cast<size_t>(S));
  std::vector<int64_t> picked_rows;
  int32_t K = 0;
  for (int64_t s = 0; s < S; ++s) {
    rows[s].forced_token = jobs[s].token;
    picked_rows.push_back(jobs[s].row);
    K = std::max(K, jobs[s].top);
  }
  K = static_cast<int32_t>(std::min<int64_t>(K, V));
  StatusOr<SampledRows> got = SampleRowsOnDevice(dev, logits, picked_rows, rows, {}, {}, K);
  for (int64_t s = 0; s < S; ++s) {
    auto it = requests_.find(jobs[s].id);
    if (it == requests_.end()) continue;
    if (!got.ok()) {
      Fail(jobs[s].id, got.status().WithContext("prompt logprobs on the device"));
      continue;
    }
    it->second->prompt_lps.push_back(LogprobsOf(*got, s, K, jobs[s].top));
  }
}

}  // namespace lucid

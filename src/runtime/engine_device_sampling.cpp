// EngineCore's sampling where the logits are (a device backend): the non-finite scan and
// Ops::SampleRows run on the backend, and the host reads one flag per row, then the tokens and
// logprobs; a constrained request's grammar bitmask is uploaded and applied there
// (Ops::ApplyTokenBitmask). Of the logits the host reads only the rows of requests that still
// collect prompt rows (HostLogitRows). The result equals the host path's (runtime/sampler.h) token
// for token: the same parameters and edits (RequestSampler::Plan) and the same arithmetic
// (ops/sampling.h).
#include <algorithm>
#include <vector>

#include "runtime/engine_core.h"
#include "runtime/engine_request.h"

namespace lucid {

bool EngineCore::NeedsHostLogits(const Request& r) {
  return r.generated == 0 && (r.prompt_lp_top >= 0 || r.prompt_logits.raw() != nullptr);
}

StatusOr<std::vector<int32_t>> EngineCore::NonFiniteLogitRows(Backend& dev, const Tensor& logits) {
  const int64_t R = logits.size(0);
  if (R == 0) return std::vector<int32_t>();
  Tensor flags = Tensor::Empty(DType::kI32, {R}, dev.workspace());
  dev.ops().NonFiniteRows(logits, flags);
  LUCID_ASSIGN_OR_RETURN(Tensor host, dev.ReadableOnHost(flags));
  return std::vector<int32_t>(host.data<const int32_t>(), host.data<const int32_t>() + R);
}

StatusOr<Tensor> EngineCore::HostLogitRows(Backend& dev, const Tensor& logits,
                                           const std::vector<int64_t>& rows) {
  if (rows.empty()) return Tensor();
  if (static_cast<int64_t>(rows.size()) == logits.size(0)) return dev.ReadableOnHost(logits);
  Tensor picked = Tensor::Empty(DType::kF32, {static_cast<int64_t>(rows.size()), logits.size(1)},
                                dev.workspace());
  dev.ops().GatherRows(logits, rows, picked);
  return dev.ReadableOnHost(picked);
}

void EngineCore::SampleOnDevice(Backend& dev, const Tensor& logits,
                                const std::vector<std::pair<uint64_t, int64_t>>& picks) {
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
  const Ops& ops = dev.ops();
  Workspace& ws = dev.workspace();
  Tensor picked = logits;
  if (S != logits.size(0)) {  // rows of failed chunks are not sampled
    picked = Tensor::Empty(DType::kF32, {S, V}, ws);
    ops.GatherRows(logits, picked_rows, picked);
  }
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
  if (!jobs.empty()) {
    FillBitmasksInParallel(jobs);
    ops.ApplyTokenBitmask(picked, dev.StepCopy(words).Reshape({S, W}));
  }
  Tensor scratch = Tensor::Empty(DType::kF32, {S, V}, ws);
  Tensor tokens = Tensor::Empty(DType::kI32, {S}, ws);
  Tensor lps = Tensor::Empty(DType::kF32, {S, 1 + K}, ws);
  Tensor top = Tensor::Empty(DType::kI32, {S, K}, ws);
  ops.SampleRows(picked, rows, edits, scratch, tokens, lps, top);
  StatusOr<Tensor> host_tokens = dev.ReadableOnHost(tokens);
  StatusOr<Tensor> host_lps = host_tokens.ok() ? dev.ReadableOnHost(lps) : host_tokens;
  StatusOr<Tensor> host_top = !host_lps.ok() ? host_lps
                              : K > 0        ? dev.ReadableOnHost(top)
                                             : StatusOr<Tensor>(Tensor());
  if (!host_top.ok()) {
    for (const auto& [id, row] : picks) Fail(id, host_top.status().WithContext("device sampling"));
    return;
  }
  for (int64_t s = 0; s < S; ++s) {
    auto it = requests_.find(picks[s].first);
    if (it == requests_.end()) continue;
    Request& r = *it->second;
    const int32_t token = host_tokens->data<const int32_t>()[s];
    r.sampler.Record(token);
    TokenLogprob lp;
    if (r.params.logprobs >= 0) {
      const float* l = host_lps->data<const float>() + s * (1 + K);
      lp.token = token;
      lp.logprob = l[0];
      for (int32_t j = 0; j < std::min(r.params.logprobs, K); ++j)
        lp.top.emplace_back(host_top->data<const int32_t>()[s * K + j], l[1 + j]);
    }
    Emit(r, token, std::move(lp));
  }
}

}  // namespace lucid

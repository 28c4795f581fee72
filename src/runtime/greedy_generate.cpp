#include "runtime/greedy_generate.h"

namespace lucid {

int32_t ArgMax(const float* v, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return static_cast<int32_t>(best);
}

StatusOr<std::vector<int32_t>> GreedyGenerate(Model& model, const std::vector<int32_t>& prompt,
                                              int64_t max_new_tokens, Tensor* prompt_logits,
                                              int64_t page_size, KvDtype kv_dtype) {
  const int64_t V = model.config().vocab_size;
  const int64_t total = static_cast<int64_t>(prompt.size()) + max_new_tokens;
  KvPool pool(model.kv_spec(), (total + page_size - 1) / page_size, page_size, kv_dtype);
  SequenceKv seq;
  LUCID_RETURN_IF_ERROR(pool.Reserve(seq, total));
  std::vector<int32_t> out;
  Tensor logits;
  SequenceChunk chunk{&seq, prompt};
  LUCID_RETURN_IF_ERROR(model.Forward({&chunk, 1}, pool, &logits));
  if (prompt_logits != nullptr) *prompt_logits = logits;
  const float* last = logits.data<const float>() + (logits.size(0) - 1) * V;
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    out.push_back(ArgMax(last, V));
    if (i + 1 == max_new_tokens) break;
    SequenceChunk step{&seq, std::span<const int32_t>(&out.back(), 1)};
    LUCID_RETURN_IF_ERROR(model.Forward({&step, 1}, pool, &logits));
    last = logits.data<const float>();
  }
  return out;
}

}  // namespace lucid

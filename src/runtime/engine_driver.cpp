#include "runtime/engine_driver.h"

#include <algorithm>

namespace lucid {

Engine::Sink ResultCollector::sink() {
  return [this](const RequestOutput& out) { Add(out); };
}

void ResultCollector::Add(const RequestOutput& out) {
  std::lock_guard<std::mutex> lock(mu_);
  GenerationResult& r = result_;
  if (r.finished) r.order_ok = false;
  r.tokens.insert(r.tokens.end(), out.new_tokens.begin(), out.new_tokens.end());
  r.text += out.text;
  r.logprobs.insert(r.logprobs.end(), out.logprobs.begin(), out.logprobs.end());
  r.prompt_logprobs.insert(r.prompt_logprobs.end(), out.prompt_logprobs.begin(),
                           out.prompt_logprobs.end());
  if (out.prompt_logits.raw() != nullptr) r.prompt_logits = out.prompt_logits;
  r.prompt_tokens = out.prompt_tokens;
  r.completion_tokens = out.completion_tokens;
  r.cached_tokens = out.cached_tokens;
  ++r.events;
  if (out.finished) {
    r.finished = true;
    r.finish_reason = out.finish_reason;
    r.error = out.error;
    cv_.notify_all();
  }
}

GenerationResult ResultCollector::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return result_.finished; });
  return result_;
}

bool ResultCollector::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return result_.finished;
}

StatusOr<std::vector<GenerationResult>> RunToCompletion(EngineCore& core,
                                                        std::vector<GenerationRequest> requests,
                                                        int64_t max_steps, int64_t* max_running) {
  for (size_t i = 0; i < requests.size(); ++i)
    LUCID_RETURN_IF_ERROR(core.Validate(requests[i]).WithContext("request " + std::to_string(i)));
  std::vector<std::unique_ptr<ResultCollector>> collectors;
  for (size_t i = 0; i < requests.size(); ++i) {
    collectors.push_back(std::make_unique<ResultCollector>());
    core.Add(i + 1, std::move(requests[i]), collectors.back()->sink());
  }
  for (int64_t step = 0; core.HasWork(); ++step) {
    if (step == max_steps) return Internal("RunToCompletion: still busy after max_steps steps");
    core.Step();
    if (max_running != nullptr) *max_running = std::max(*max_running, core.Stats().running);
  }
  std::vector<GenerationResult> out;
  for (auto& c : collectors) {
    if (!c->finished()) return Internal("RunToCompletion: a request got no final event");
    out.push_back(c->Wait());
  }
  return out;
}

StatusOr<std::vector<GenerationResult>> GenerateAll(Engine& engine,
                                                    std::vector<GenerationRequest> requests) {
  std::vector<std::unique_ptr<ResultCollector>> collectors;
  for (size_t i = 0; i < requests.size(); ++i) {
    collectors.push_back(std::make_unique<ResultCollector>());
    auto id = engine.Submit(std::move(requests[i]), collectors.back()->sink());
    if (!id.ok()) {
      // Already-submitted requests still deliver to their collectors: wait for them first.
      for (size_t j = 0; j < i; ++j) collectors[j]->Wait();
      return id.status().WithContext("request " + std::to_string(i));
    }
  }
  std::vector<GenerationResult> out;
  for (auto& c : collectors) out.push_back(c->Wait());
  return out;
}

namespace {

class BorrowedModel final : public Model {
 public:
  explicit BorrowedModel(Model& m) : m_(m) {}
  const ModelConfig& config() const override { return m_.config(); }
  const KvCacheSpec& kv_spec() const override { return m_.kv_spec(); }
  Allocator& kv_allocator() const override { return m_.kv_allocator(); }
  uint64_t weight_bytes() const override { return m_.weight_bytes(); }
  Status Forward(const StepInput& in, KvStorage& kv, StepOutput* out) override {
    return m_.Forward(in, kv, out);
  }
  bool SetNumericsCheck(bool on) override { return m_.SetNumericsCheck(on); }
  std::vector<std::optional<NonFiniteSite>> LastNonFiniteSites() const override {
    return m_.LastNonFiniteSites();
  }

 private:
  Model& m_;
};

}  // namespace

std::unique_ptr<Model> BorrowModel(Model& model) { return std::make_unique<BorrowedModel>(model); }

StatusOr<std::vector<int32_t>> GreedyGenerate(Model& model, const std::vector<int32_t>& prompt,
                                              int64_t max_new_tokens, Tensor* prompt_logits,
                                              int64_t page_size, KvDtype kv_dtype) {
  if (max_new_tokens < 0) return InvalidArgument("max_new_tokens must be >= 0");
  // The engine generates at least one token; with 0 asked, the one it makes is not returned.
  const int64_t n = std::max<int64_t>(max_new_tokens, 1);
  const int64_t prompt_len = static_cast<int64_t>(prompt.size());
  EngineOptions o;
  o.page_size = page_size;
  o.kv_dtype = kv_dtype;
  o.num_pages = std::max<int64_t>(1, (prompt_len + n + page_size - 1) / page_size);
  o.max_running_requests = 1;
  o.chunked_prefill_size = std::max<int64_t>(prompt_len, 1);
  // Non-finite rows are still caught where they are used (the sampled rows, and every prompt row
  // when prompt_logits is asked for).
  o.nan_check = EngineOptions::NanCheck::kOff;
  LUCID_ASSIGN_OR_RETURN(std::unique_ptr<EngineCore> core,
                         EngineCore::Create(BorrowModel(model), nullptr, o));
  GenerationRequest r;
  r.prompt = prompt;
  r.sampling.temperature = 0;
  r.sampling.max_tokens = n;
  r.sampling.ignore_eos = true;
  r.prompt_logits = prompt_logits != nullptr;
  LUCID_ASSIGN_OR_RETURN(std::vector<GenerationResult> results,
                         RunToCompletion(*core, {std::move(r)}));
  GenerationResult& g = results[0];
  if (g.finish_reason == "error") return g.error;
  if (prompt_logits != nullptr) *prompt_logits = std::move(g.prompt_logits);
  g.tokens.resize(static_cast<size_t>(std::min<int64_t>(max_new_tokens, g.tokens.size())));
  return std::move(g.tokens);
}

int32_t ArgMax(const float* v, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return static_cast<int32_t>(best);
}

}  // namespace lucid

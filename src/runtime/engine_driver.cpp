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

}  // namespace lucid

// FakeEngine: a deterministic Engine for the server's unit tests (no model).
//
// Each request generates, one token per step for every active request, the ids
// (last prompt id + 1, + 2, ...) mod vocab; the text of id t is "<t>" (so stop strings can be
// tested); greedy or not, the output depends only on the prompt. It stops at max_tokens, at a
// stop_token_id, or at `eos` (unless ignore_eos). Each active request holds one "page".
// `step_delay` slows generation so tests can disconnect or fill the admission limit.
// Thread-safety: as the Engine contract (one engine thread; Submit/Abort/Stats thread-safe).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/engine.h"

namespace lucid::server {

class FakeEngine : public Engine {
 public:
  explicit FakeEngine(int64_t vocab = 256, int32_t eos = 1,
                      std::chrono::milliseconds step_delay = std::chrono::milliseconds(0))
      : vocab_(vocab), eos_(eos), delay_(step_delay) {
    config_.vocab_size = vocab;
    thread_ = std::thread([this] { Loop(); });
  }
  ~FakeEngine() override { Stop(); }

  StatusOr<uint64_t> Submit(GenerationRequest request, Sink sink) override {
    if (request.prompt.empty()) return InvalidArgument("empty prompt");
    for (int32_t id : request.prompt)
      if (id < 0 || id >= vocab_) return InvalidArgument("token id out of range");
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return Status(StatusCode::kUnavailable, "engine stopped");
    const uint64_t id = next_id_++;
    stats_.prompt_tokens += int64_t(request.prompt.size());
    active_[id] = Active{std::move(request), std::move(sink), 0};
    cv_.notify_all();
    return id;
  }
  void Abort(uint64_t id) override {
    std::lock_guard<std::mutex> lock(mu_);
    aborts_.push_back(id);
    cv_.notify_all();
  }
  EngineStats Stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    EngineStats s = stats_;
    s.running = int64_t(active_.size());
    s.pages_total = 100;
    s.pages_used = int64_t(active_.size());
    return s;
  }
  const ModelConfig& model_config() const override { return config_; }
  void Stop() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      stopped_ = true;
      cv_.notify_all();
    }
    thread_.join();
  }
  // Makes every later request emit these texts, one per step, then finish with "stop" (a model
  // that writes a scripted answer); empty: the "<t>" texts.
  void Script(std::vector<std::string> pieces) {
    std::lock_guard<std::mutex> lock(mu_);
    script_ = std::move(pieces);
  }
  // Makes every later request fail with this error at its first step (empty: none).
  void FailWith(std::string message) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_ = std::move(message);
  }

 private:
  struct Active {
    GenerationRequest req;
    Sink sink;
    int64_t generated = 0;
  };

  void Finish(uint64_t id, const std::string& reason, Status error = OkStatus()) {
    Active& a = active_[id];
    RequestOutput o;
    o.finished = true;
    o.finish_reason = reason;
    o.error = error;
    o.prompt_tokens = int64_t(a.req.prompt.size());
    o.completion_tokens = a.generated;
    a.sink(o);
    if (reason == "abort")
      ++stats_.requests_aborted;
    else if (reason == "error") {
      ++stats_.requests_error;
      if (error.message().rfind("numerics:", 0) == 0) ++stats_.requests_numeric_error;
    } else
      ++stats_.requests_ok;
    active_.erase(id);
  }

  void Step() {
    for (uint64_t id : aborts_)
      if (active_.count(id)) Finish(id, "abort");
    aborts_.clear();
    std::vector<uint64_t> ids;
    for (auto& [id, a] : active_) ids.push_back(id);
    for (uint64_t id : ids) {
      Active& a = active_[id];
      if (!fail_.empty()) {
        Finish(id, "error", Internal(fail_));
        continue;
      }
      const int32_t tok = int32_t((a.req.prompt.back() + a.generated + 1) % vocab_);
      ++a.generated;
      ++stats_.generated_tokens;
      RequestOutput o;
      o.new_tokens = {tok};
      const bool eos = !a.req.sampling.ignore_eos && tok == eos_;
      const auto& st = a.req.sampling.stop_token_ids;
      const bool stop_id = std::find(st.begin(), st.end(), tok) != st.end();
      if (!eos && !stop_id) o.text = "<" + std::to_string(tok) + ">";
      const bool scripted_end = !script_.empty() && a.generated >= int64_t(script_.size());
      if (!script_.empty()) o.text = script_[size_t(a.generated - 1) % script_.size()];
      if (a.req.sampling.logprobs >= 0) {
        TokenLogprob lp{tok, -0.5f, {}};
        for (int k = 0; k < a.req.sampling.logprobs; ++k)
          lp.top.push_back({int32_t((tok + k) % vocab_), -0.5f - float(k)});
        o.logprobs.push_back(lp);
      }
      o.prompt_tokens = int64_t(a.req.prompt.size());
      o.completion_tokens = a.generated;
      const bool length = a.generated >= a.req.sampling.max_tokens;
      if (eos || stop_id || length || scripted_end) {
        o.finished = true;
        o.finish_reason = (eos || stop_id || scripted_end) ? "stop" : "length";
        ++stats_.requests_ok;
        a.sink(o);
        active_.erase(id);
      } else {
        a.sink(o);
      }
    }
  }

  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stopped_ || !active_.empty() || !aborts_.empty(); });
      if (stopped_) {
        std::vector<uint64_t> ids;
        for (auto& [id, a] : active_) ids.push_back(id);
        for (uint64_t id : ids) Finish(id, "abort");
        return;
      }
      Step();
      if (delay_.count() > 0) {
        lock.unlock();
        std::this_thread::sleep_for(delay_);
        lock.lock();
      }
    }
  }

  int64_t vocab_;
  int32_t eos_;
  std::chrono::milliseconds delay_;
  ModelConfig config_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Active> active_;
  std::vector<uint64_t> aborts_;
  EngineStats stats_;
  uint64_t next_id_ = 1;
  bool stopped_ = false;
  std::string fail_;
  std::vector<std::string> script_;
  std::thread thread_;
};

}  // namespace lucid::server

// GenerationJob: one HTTP generation request = one or more engine requests (prompts x n), and the
// channel their events travel on from the engine thread to the HTTP thread.
//
// The engine calls each request's sink on its own thread; the sink only pushes the event, with
// its arrival time, onto the job's channel and notifies (it never blocks on HTTP). The HTTP
// thread calls Next() to take pending events, which also folds them into per-choice state
// (tokens, text, logprobs, finish reason, token counts) and observes TTFT / inter-token /
// end-to-end latencies into ServerMetrics.
// Ownership: the job is held by shared_ptr; each sink holds only the channel, so an engine event
// that arrives after the HTTP side is gone is dropped harmlessly. The engine must outlive the job.
// Thread-safety: Submit/Next/AbortUnfinished are for the one HTTP thread that owns the job; the
// channel is the only state shared with the engine thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "server/api_error.h"
#include "server/server_metrics.h"

namespace lucid::server {

using Clock = std::chrono::steady_clock;

struct ChoiceEvent {
  size_t choice = 0;
  RequestOutput output;
  Clock::time_point at;
};

// A multi-producer, single-consumer queue of events with a condition variable.
class EventChannel {
 public:
  void Push(ChoiceEvent event);
  // Everything pending, waiting up to `timeout` for the first event (empty on timeout).
  std::vector<ChoiceEvent> Take(std::chrono::milliseconds timeout);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ChoiceEvent> events_;
};

struct ChoiceState {
  size_t prompt_index = 0;
  int64_t prompt_tokens = 0;
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<TokenLogprob> logprobs;
  std::vector<TokenLogprob> prompt_logprobs;  // when the request asked for them
  bool finished = false;
  std::string finish_reason;
  Status error;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
  std::optional<Clock::time_point> last_token_at;
};

class GenerationJob {
 public:
  // `requests[i]` is choice i; `prompt_index[i]` says which prompt it came from.
  GenerationJob(Engine* engine, ServerMetrics* metrics, std::vector<GenerationRequest> requests,
                std::vector<size_t> prompt_index, Clock::time_point arrival);
  ~GenerationJob();  // aborts what is unfinished

  // Submits every choice. On an error, already submitted choices are aborted and the engine's
  // Status is returned (the caller maps it to an HTTP error).
  Status Submit();
  // Takes pending events (waits up to `timeout` for one) and folds them into choices().
  std::vector<ChoiceEvent> Next(std::chrono::milliseconds timeout);
  bool AllFinished() const { return finished_count_ == choices_.size(); }
  // Aborts every submitted, unfinished choice (client gone, or another choice failed).
  void AbortUnfinished();

  const std::vector<ChoiceState>& choices() const { return choices_; }
  // The first choice that finished with an error, or nullptr.
  const ChoiceState* FirstError() const;
  Clock::time_point arrival() const { return arrival_; }

 private:
  void Fold(const ChoiceEvent& e);

  Engine* engine_;
  ServerMetrics* metrics_;
  std::vector<GenerationRequest> requests_;
  std::vector<ChoiceState> choices_;
  std::vector<std::optional<uint64_t>> ids_;
  std::shared_ptr<EventChannel> channel_ = std::make_shared<EventChannel>();
  size_t finished_count_ = 0;
  Clock::time_point arrival_;
};

}  // namespace lucid::server

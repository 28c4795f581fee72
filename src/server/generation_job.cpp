#include "server/generation_job.h"

namespace lucid::server {

void EventChannel::Push(ChoiceEvent event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(event));
  }
  cv_.notify_one();
}

std::vector<ChoiceEvent> EventChannel::Take(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !events_.empty(); });
  std::vector<ChoiceEvent> out(std::make_move_iterator(events_.begin()),
                               std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

GenerationJob::GenerationJob(Engine* engine, ServerMetrics* metrics,
                             std::vector<GenerationRequest> requests,
                             std::vector<size_t> prompt_index, Clock::time_point arrival)
    : engine_(engine),
      metrics_(metrics),
      requests_(std::move(requests)),
      choices_(requests_.size()),
      ids_(requests_.size()),
      arrival_(arrival) {
  for (size_t i = 0; i < choices_.size(); ++i) {
    choices_[i].prompt_index = i < prompt_index.size() ? prompt_index[i] : 0;
    choices_[i].prompt_tokens = static_cast<int64_t>(requests_[i].prompt.size());
  }
}

GenerationJob::~GenerationJob() { AbortUnfinished(); }

Status GenerationJob::Submit() {
  for (size_t i = 0; i < requests_.size(); ++i) {
    std::shared_ptr<EventChannel> channel = channel_;
    Engine::Sink sink = [channel, i](const RequestOutput& out) {
      channel->Push(ChoiceEvent{i, out, Clock::now()});
    };
    StatusOr<uint64_t> id = engine_->Submit(requests_[i], std::move(sink));
    if (!id.ok()) {
      AbortUnfinished();
      return id.status();
    }
    ids_[i] = *id;
  }
  return OkStatus();
}

void GenerationJob::AbortUnfinished() {
  for (size_t i = 0; i < ids_.size(); ++i) {
    if (ids_[i] && !choices_[i].finished) engine_->Abort(*ids_[i]);
    ids_[i].reset();
  }
}

const ChoiceState* GenerationJob::FirstError() const {
  for (const ChoiceState& c : choices_)
    if (c.finished && c.finish_reason == "error") return &c;
  return nullptr;
}

std::vector<ChoiceEvent> GenerationJob::Next(std::chrono::milliseconds timeout) {
  std::vector<ChoiceEvent> events = channel_->Take(timeout);
  for (const ChoiceEvent& e : events) Fold(e);
  return events;
}

void GenerationJob::Fold(const ChoiceEvent& e) {
  if (e.choice >= choices_.size()) return;
  ChoiceState& c = choices_[e.choice];
  if (c.finished) return;
  const RequestOutput& o = e.output;
  if (!o.new_tokens.empty() && metrics_) {
    if (!c.last_token_at) {
      metrics_->ObserveTtft(std::chrono::duration<double>(e.at - arrival_).count());
    } else {
      // Tokens that arrive together share the gap since the previous event.
      const double gap = std::chrono::duration<double>(e.at - *c.last_token_at).count();
      for (size_t k = 0; k < o.new_tokens.size(); ++k)
        metrics_->ObserveInterToken(gap / double(o.new_tokens.size()));
    }
    c.last_token_at = e.at;
  }
  c.tokens.insert(c.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
  c.text += o.text;
  c.logprobs.insert(c.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
  c.prompt_logprobs.insert(c.prompt_logprobs.end(), o.prompt_logprobs.begin(),
                           o.prompt_logprobs.end());
  if (o.prompt_tokens > 0) c.prompt_tokens = o.prompt_tokens;
  c.completion_tokens = std::max<int64_t>(o.completion_tokens, c.tokens.size());
  c.cached_tokens = std::max(c.cached_tokens, o.cached_tokens);
  if (o.finished) {
    c.finished = true;
    c.finish_reason = o.finish_reason.empty() ? "stop" : o.finish_reason;
    c.error = o.error;
    if (c.finish_reason == "error" && c.error.ok())
      c.error = Internal("the engine failed the request");
    ids_[e.choice].reset();
    ++finished_count_;
    if (metrics_) metrics_->ObserveE2e(std::chrono::duration<double>(e.at - arrival_).count());
  }
}

}  // namespace lucid::server

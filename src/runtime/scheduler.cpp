#include "runtime/scheduler.h"

#include <algorithm>

namespace lucid {

namespace {

bool ByArrival(const ScheduledSequence* a, const ScheduledSequence* b) {
  return a->arrival < b->arrival;
}

}  // namespace

Scheduler::Scheduler(const SchedulerOptions& options, KvBlockManager& blocks)
    : options_(options), blocks_(blocks) {
  LUCID_CHECK(options.max_running_requests > 0 && options.chunked_prefill_size > 0,
              "scheduler limits must be positive");
}

void Scheduler::Add(uint64_t id, std::vector<int32_t> prompt, bool every_row,
                    int64_t max_prefix_reuse) {
  LUCID_CHECK(!prompt.empty(), "empty prompt");
  LUCID_CHECK(seqs_.count(id) == 0, "duplicate sequence id");
  auto s = std::make_unique<ScheduledSequence>();
  s->id = id;
  s->prompt_len = static_cast<int64_t>(prompt.size());
  s->max_prefix_reuse = max_prefix_reuse;
  s->tokens = std::move(prompt);
  s->arrival = next_arrival_++;
  s->every_row = every_row;
  waiting_.push_back(s.get());
  seqs_.emplace(id, std::move(s));
}

ScheduledSequence* Scheduler::Find(uint64_t id) {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

bool Scheduler::Finish(uint64_t id) {
  ScheduledSequence* s = Find(id);
  if (s == nullptr) return false;
  blocks_.Release(s->kv, s->chain);
  if (s->running) {
    running_.erase(std::find(running_.begin(), running_.end(), s));
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), s));
  }
  seqs_.erase(id);
  return true;
}

void Scheduler::Append(uint64_t id, int32_t token) {
  ScheduledSequence* s = Find(id);
  LUCID_CHECK(s != nullptr, "Append to an unknown sequence");
  s->tokens.push_back(token);
}

void Scheduler::Commit(const ScheduledChunk& chunk) {
  ScheduledSequence* s = chunk.seq;
  LUCID_CHECK(chunk.begin == s->kv.length, "Commit: the chunk does not start at the KV length");
  s->kv.length = chunk.begin + chunk.count;
  blocks_.CommitFullPages(s->tokens, s->kv, s->chain);
}

void Scheduler::InsertWaiting(ScheduledSequence* s) {
  waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), s, ByArrival), s);
}

void Scheduler::Preempt(ScheduledSequence* victim, StepPlan& plan, int64_t& budget) {
  auto c = std::find_if(plan.chunks.begin(), plan.chunks.end(),
                        [&](const ScheduledChunk& ch) { return ch.seq == victim; });
  if (c != plan.chunks.end()) {
    budget += c->count;
    plan.chunks.erase(c);
  }
  blocks_.Release(victim->kv, victim->chain);
  victim->running = false;
  ++victim->preemptions;
  ++preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), victim));
  InsertWaiting(victim);
  plan.preempted.push_back(victim->id);
}

bool Scheduler::GrowRunning(ScheduledSequence* s, int64_t count, StepPlan& plan, int64_t& budget) {
  while (!blocks_.Grow(s->kv, s->kv.length + count).ok()) {
    // The newest sequence whose pages are in s's partition (only those free pages for s).
    auto newest = std::find_if(running_.rbegin(), running_.rend(), [&](ScheduledSequence* r) {
      return r->kv.partition == s->kv.partition;
    });
    ScheduledSequence* victim = *newest;  // s itself at the latest
    Preempt(victim, plan, budget);
    if (victim == s) return false;
  }
  return true;
}

void Scheduler::ScheduleRunning(bool decode_pass, StepPlan& plan, int64_t& budget) {
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    ScheduledSequence* s = running_[i];
    const int64_t need = static_cast<int64_t>(s->tokens.size()) - s->kv.length;
    if (need <= 0 || decode_pass != (need == 1)) {
      ++i;
      continue;
    }
    const int64_t n = std::min(need, budget);
    // Preempted, s was the newest of its partition and running_[i] is now the next sequence (one
    // of another partition; with one partition, none).
    if (!GrowRunning(s, n, plan, budget)) continue;
    plan.chunks.push_back({s, s->kv.length, n});
    budget -= n;
    ++i;
  }
}

void Scheduler::AdmitWaiting(StepPlan& plan, int64_t& budget) {
  while (budget > 0 && running() < options_.max_running_requests && !waiting_.empty()) {
    ScheduledSequence* s = waiting_.front();
    s->kv.partition = blocks_.EmptiestPartition();  // its attention rank (data-parallel attention)
    const int64_t known = static_cast<int64_t>(s->tokens.size());
    const int64_t hit =
        blocks_.AcquirePrefix(s->tokens, std::min(known - 1, s->max_prefix_reuse), s->kv, s->chain);
    const int64_t n = std::min(known - s->kv.length, budget);
    if (!blocks_.Grow(s->kv, s->kv.length + n).ok()) {
      blocks_.Release(s->kv, s->chain);  // FIFO: nobody overtakes the head of the queue
      return;
    }
    if (s->cached_tokens < 0) {
      s->cached_tokens = std::min(hit, s->prompt_len);
      hit_tokens_ += s->cached_tokens;
    }
    waiting_.pop_front();
    s->running = true;
    running_.insert(std::upper_bound(running_.begin(), running_.end(), s, ByArrival), s);
    plan.chunks.push_back({s, s->kv.length, n});
    budget -= n;
  }
}

StepPlan Scheduler::Schedule() {
  StepPlan plan;
  int64_t budget = options_.chunked_prefill_size;
  ScheduleRunning(/*decode_pass=*/true, plan, budget);
  ScheduleRunning(/*decode_pass=*/false, plan, budget);
  // A step that had to preempt is short of pages: admitting now would only thrash.
  if (plan.preempted.empty()) AdmitWaiting(plan, budget);
  return plan;
}

}  // namespace lucid

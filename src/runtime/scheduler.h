// Scheduler: continuous batching in tokens and pages; knows nothing of models or kernels.
//
// A sequence's tokens are its prompt followed by what it has generated; its KV covers the first
// kv.length of them. Each step, Schedule() returns the chunks to compute, {sequence: tokens
// [kv.length, kv.length + count)}, within the token budget (--chunked-prefill-size) and the
// running-request limit (--max-running-requests), in this order:
//   1. running sequences that need one token (decode), oldest first;
//   2. running sequences with more to compute (chunked prefill, or recompute), oldest first;
//   3. waiting sequences, strictly FIFO (admission stops at the first that does not fit), each
//      first reusing what the prefix cache holds of its tokens (never the last token: the step
//      must produce logits for it).
// When a running sequence cannot get pages, the newest running sequence is preempted: its pages
// are released (the full ones it computed stay cached) and it goes back to the waiting queue in
// arrival order, to be recomputed. The oldest running sequence therefore always progresses, so as
// long as every sequence fits the pool on its own (the engine validates that), every sequence
// finishes and nothing deadlocks. Admission never preempts.
// With a partitioned pool (data-parallel attention: KvBlockManager partitions, one per attention
// rank) a sequence is admitted to the partition with the most available pages, and the rule above
// holds within each partition: the victim is the newest running sequence of the same partition,
// so the oldest of each partition progresses (each partition must hold any sequence alone).
// After the step's forward, the engine calls Commit for each chunk whose KV it accepted (that
// advances kv.length and registers newly full pages in the prefix cache), Append for each sampled
// token, and Finish for sequences that are done, failed or aborted. Thread-safety: none; owned by
// the engine thread.
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/kv_block_manager.h"

namespace lucid {

struct SchedulerOptions {
  int64_t max_running_requests = 64;
  int64_t chunked_prefill_size = 2048;  // tokens computed per step, all sequences together
};

struct ScheduledSequence {
  uint64_t id = 0;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int64_t prompt_len = 0;
  SequenceKv kv;
  PageChain chain;
  uint64_t arrival = 0;        // order of Add
  int64_t cached_tokens = -1;  // prompt tokens reused at first admission (-1: not admitted yet)
  int64_t max_prefix_reuse = std::numeric_limits<int64_t>::max();
  int64_t preemptions = 0;
  bool running = false;
  bool every_row = false;  // logits for every row of its chunks (prompt logits / logprobs)
};

struct ScheduledChunk {
  ScheduledSequence* seq = nullptr;
  int64_t begin = 0;  // == seq->kv.length when scheduled
  int64_t count = 0;
  // The chunk reaches the last known token, so its last logits row samples the next token.
  bool completes() const { return begin + count == static_cast<int64_t>(seq->tokens.size()); }
};

struct StepPlan {
  std::vector<ScheduledChunk> chunks;
  std::vector<uint64_t> preempted;  // sequences sent back to the queue during this Schedule
  int64_t tokens() const {
    int64_t n = 0;
    for (const auto& c : chunks) n += c.count;
    return n;
  }
};

class Scheduler {
 public:
  // `blocks` must outlive the scheduler.
  Scheduler(const SchedulerOptions& options, KvBlockManager& blocks);

  // Queues a new sequence (id unique, prompt non-empty). every_row: see ScheduledSequence.
  // `max_prefix_reuse` bounds the tokens taken from the prefix cache (prompt logprobs and prompt
  // logits need the rows of the positions after it).
  void Add(uint64_t id, std::vector<int32_t> prompt, bool every_row = false,
           int64_t max_prefix_reuse = std::numeric_limits<int64_t>::max());
  // Releases the sequence's pages and forgets it. False if unknown.
  bool Finish(uint64_t id);
  ScheduledSequence* Find(uint64_t id);

  StepPlan Schedule();
  // The chunk's KV is computed and accepted: the sequence's KV length grows to cover it (the model
  // never writes lengths) and its newly full pages are registered in the prefix cache.
  void Commit(const ScheduledChunk& chunk);
  // Appends a generated token to a sequence.
  void Append(uint64_t id, int32_t token);

  int64_t running() const { return static_cast<int64_t>(running_.size()); }
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }
  bool empty() const { return running_.empty() && waiting_.empty(); }
  int64_t total_preemptions() const { return preemptions_; }
  // Cumulative prompt tokens reused from the prefix cache at first admission.
  int64_t prefix_hit_tokens() const { return hit_tokens_; }

 private:
  // Gives `chunk` pages for `count` more tokens, preempting newer running sequences as needed;
  // false if `s` itself had to be preempted.
  bool GrowRunning(ScheduledSequence* s, int64_t count, StepPlan& plan, int64_t& budget);
  void Preempt(ScheduledSequence* victim, StepPlan& plan, int64_t& budget);
  void ScheduleRunning(bool decode_pass, StepPlan& plan, int64_t& budget);
  void AdmitWaiting(StepPlan& plan, int64_t& budget);
  void InsertWaiting(ScheduledSequence* s);  // keeps arrival order

  SchedulerOptions options_;
  KvBlockManager& blocks_;
  std::unordered_map<uint64_t, std::unique_ptr<ScheduledSequence>> seqs_;
  std::vector<ScheduledSequence*> running_;  // arrival order
  std::deque<ScheduledSequence*> waiting_;   // arrival order
  uint64_t next_arrival_ = 0;
  int64_t preemptions_ = 0;
  int64_t hit_tokens_ = 0;
};

}  // namespace lucid

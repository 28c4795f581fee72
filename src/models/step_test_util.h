// Test helpers that act as the engine around Model::Forward: hand out pages of a KvStorage the
// test owns, build the StepInput, and advance the sequences' lengths after a step.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "models/model.h"

namespace lucid {

// The tiny checkpoint tests/fixtures/models/<name>.
inline std::string TinyFixture(const std::string& name) {
  return std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/models/" + name;
}

// n token ids in [2, 253), a different sequence per salt.
inline std::vector<int32_t> TestTokens(int64_t n, int32_t salt) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(static_cast<int32_t>((i * 37 + salt) % 251 + 2));
  return t;
}

// Consecutive page ids of one KvStorage, never reused (a test's storage lives for the test).
class TestPages {
 public:
  explicit TestPages(int64_t page_size) : page_size_(page_size) {}
  // A sequence with pages for `tokens` slots.
  SequenceKv New(int64_t tokens) {
    SequenceKv s;
    for (int64_t p = 0; p < (tokens + page_size_ - 1) / page_size_; ++p)
      s.page_table.push_back(next_++);
    return s;
  }
  int64_t used() const { return next_; }

 private:
  int64_t page_size_;
  int32_t next_ = 0;
};

using TestChunk = std::pair<SequenceKv*, std::span<const int32_t>>;

// One Forward over the chunks (each at its sequence's length), logits for `rows` of each chunk;
// on success every sequence's length grows by its chunk.
inline Status ForwardChunks(Model& m, KvStorage& kv, std::span<const TestChunk> chunks,
                            ChunkRows rows, Tensor* logits) {
  StepInput in;
  for (const auto& [seq, tokens] : chunks)
    AddSequence(in, seq->page_table, seq->length, tokens, rows);
  StepOutput out;
  LUCID_RETURN_IF_ERROR(m.Forward(in, kv, &out));
  for (const auto& [seq, tokens] : chunks) seq->length += static_cast<int64_t>(tokens.size());
  *logits = std::move(out.logits);
  return OkStatus();
}

inline Status ForwardChunk(Model& m, KvStorage& kv, SequenceKv& seq,
                           std::span<const int32_t> tokens, ChunkRows rows, Tensor* logits) {
  const TestChunk one[] = {{&seq, tokens}};
  return ForwardChunks(m, kv, one, rows, logits);
}

}  // namespace lucid

// StepInput / StepOutput: what one Model::Forward reads and what it writes besides the KV.
//
// The engine builds a StepInput per step and the model treats it as immutable: the model owns no
// runtime state (sequence lengths, page tables and which rows need logits are the engine's), so a
// step is a function of (StepInput, KV storage, weights). Rolling a step back is the engine
// dropping the KV slots it wrote (KvBlockManager::Truncate); the next step's output is then the
// same as if the rolled-back step had never run.
//
// Invariants of a well-formed StepInput (Model::Forward checks them and returns InvalidArgument):
// - tokens and positions have one entry per row; a sequence's rows are contiguous, sequences follow
//   one another in row order and together cover every row once.
// - sequence s's rows store their KV in slots [s.kv_length, s.kv_length + s.rows) of s.page_table,
//   and its row r attends to slots [0, s.kv_length + r + 1) (causal).
// - logits_rows and hidden_rows are strictly ascending row indices.
// Ownership: page_table spans borrow the engine's page tables, which must outlive the Forward call.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "ops/ops.h"

namespace lucid {

struct StepSequence {
  std::span<const int32_t> page_table;  // pages for slots [0, kv_length + rows) at least
  int64_t kv_length = 0;                // tokens of the sequence whose KV is already stored
  int64_t first_row = 0;                // its first row in StepInput::tokens
  int64_t rows = 0;                     // tokens it computes in this step (>= 1)
};

struct StepInput {
  std::vector<int32_t> tokens;     // [N] ids in [0, vocab)
  std::vector<int64_t> positions;  // [N] RoPE positions (kv_length + r for row r of a sequence)
  std::vector<StepSequence> sequences;
  // Rows whose logits StepOutput::logits carries, in this order. Generation needs the last row of
  // a chunk that reaches the sequence's last known token; prompt logprobs / echo need every row.
  std::vector<int64_t> logits_rows;
  // The logits stay in the memory of Model::logits_backend() (for ops over them there: the
  // engine's non-finite scan and SampleRows), instead of reaching the host. Only for a model
  // whose logits_backend() is not null.
  bool logits_on_device = false;
  // Rows whose final hidden states StepOutput::hidden carries (what an MTP draft layer reads).
  std::vector<int64_t> hidden_rows;

  int64_t num_rows() const { return static_cast<int64_t>(tokens.size()); }
};

// Which rows of a sequence's chunk get logits (or hidden states).
enum class ChunkRows {
  kNone,  // none (a prefill chunk that does not reach the last prompt token)
  kLast,  // the chunk's last row (the one that is sampled)
  kAll,   // every row (prompt logprobs, echo, numerics checking of every row)
};

// Appends one sequence's chunk to `in`: `tokens` at positions [kv_length, kv_length + size),
// with logits and hidden states for the rows asked. The rows added for it are appended to
// in.logits_rows (in.hidden_rows) in row order, so its logits are StepOutput::logits rows
// [in.logits_rows.size() before the call, in.logits_rows.size() after). Requires !tokens.empty().
void AddSequence(StepInput& in, std::span<const int32_t> page_table, int64_t kv_length,
                 std::span<const int32_t> tokens, ChunkRows logits,
                 ChunkRows hidden = ChunkRows::kNone);

struct StepOutput {
  // [logits_rows.size(), vocab] f32: row i holds the logits of input row logits_rows[i] (the
  // distribution of the token after it). Host memory, unless StepInput::logits_on_device.
  Tensor logits;
  // [hidden_rows.size(), hidden_size] f32: the final norm's output (lm_head's input) of input row
  // hidden_rows[i], as vLLM's and SGLang's MTP layers take it. Empty when hidden_rows is.
  Tensor hidden;
};

// For Model::Forward: `step` (the model's forward work, on `ops`). A tensor that did not fit ends
// it with its allocator's ResourceExhausted (core/tensor.h). After any failure the ops' queue is
// waited for and its pending error dropped, so the next step neither fails with this one's error
// nor skips its ops.
Status RunStep(const Ops& ops, const std::function<Status()>& step);

// For Model::Forward: InvalidArgument naming `what` ("logits_rows") unless `rows` (the rows a
// StepOutput gets) are strictly ascending inside [0, n).
Status CheckRowList(std::span<const int64_t> rows, int64_t n, const char* what);

}  // namespace lucid

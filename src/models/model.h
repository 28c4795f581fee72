// Model: the forward pass of one loaded checkpoint, and the KV cache it reads and writes.
//
// A step is a batch of SequenceChunks: for each sequence, the next tokens to compute (a whole
// prompt, a prefill chunk, or one decode token). The model appends their KV (MLA latent + RoPE part,
// and indexer keys) to the sequence's pages and returns logits for every computed token, in batch
// order. Outputs for a sequence do not depend on what else is in the batch.
// Thread-safety: a Model is used by one thread at a time (the engine thread).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "formats/model_config.h"
#include "models/kv_cache.h"

namespace lucid {

// Where a non-finite value first appeared in one chunk's rows (numerics checking).
struct NonFiniteSite {
  int64_t layer = -1;  // -1: outside the decoder layers (embedding, final norm, lm_head)
  std::string op;      // debug name of the op's output, e.g. "L3.moe", "embedding", "lm_head"
};

struct SequenceChunk {
  SequenceKv* seq = nullptr;         // positions [seq->length, seq->length + tokens.size())
  std::span<const int32_t> tokens;   // ids in [0, vocab)
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  virtual const KvCacheSpec& kv_spec() const = 0;
  // Bytes of weights held (packed size as stored).
  virtual uint64_t weight_bytes() const = 0;

  // Runs one step. Pages for the new positions must already be in each seq's page table
  // (KvPool::Reserve). On success each seq->length grows by its chunk size and `logits` is
  // [sum of chunk sizes, vocab] f32. Errors: InvalidArgument for token ids out of range or a
  // chunk past max context; the KV of a failed step is unspecified for the sequences involved.
  virtual Status Forward(std::span<const SequenceChunk> batch, KvPool& pool, Tensor* logits) = 0;

  // Optional numerics checking (`--nan-check layers`), off by default. While on, Forward scans the
  // output rows of each op per chunk and records, for each chunk, the first op (in execution
  // order) whose output had a non-finite value in that chunk's rows. Rows of different sequences
  // are independent through the model, so one chunk's non-finite values never reach another's.
  // Returns false (and stays off) if the model does not support it.
  virtual bool SetNumericsCheck(bool on) { return !on; }
  // Per chunk of the last Forward, in batch order: the first site, or nullopt if all its checked
  // outputs were finite. Empty when checking is off.
  virtual std::vector<std::optional<NonFiniteSite>> LastNonFiniteSites() const { return {}; }
};

// Options for loading that are not part of the checkpoint.
struct ModelLoadOptions {
  // Override of index_topk (0 = from config); tests use it to compare sparse and dense attention.
  int64_t index_topk_override = 0;
  // Skip the DSA indexer and attend to every causal token (dense MLA), for comparisons. The
  // indexer's key cache is still sized but not written.
  bool force_dense_attention = false;
};

}  // namespace lucid

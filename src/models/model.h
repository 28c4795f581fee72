// Model: the forward pass of one loaded checkpoint over the paged KV storage.
//
// A step is a StepInput (models/step.h): for each sequence, the next tokens to compute (a whole
// prompt, a prefill chunk, one decode token, or several draft tokens), its page table and how many
// of its tokens already have KV. The model writes their KV (MLA latent + RoPE part, and indexer
// keys) into the sequence's slots and fills a StepOutput with the logits (and hidden states) of the
// rows the StepInput names. It writes no other state: lengths and page tables belong to the engine.
// Outputs for a sequence do not depend on what else is in the batch.
// Thread-safety: a Model is used by one thread at a time (the engine thread).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/allocator.h"
#include "core/communicator.h"
#include "core/status.h"
#include "core/tensor.h"
#include "formats/model_config.h"
#include "models/kv_cache.h"
#include "models/step.h"

namespace lucid {

// Where a non-finite value first appeared in one chunk's rows (numerics checking).
struct NonFiniteSite {
  int64_t layer = -1;  // -1: outside the decoder layers (embedding, final norm, lm_head)
  std::string op;      // debug name of the op's output, e.g. "L3.moe", "embedding", "lm_head"
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  virtual const KvCacheSpec& kv_spec() const = 0;
  // Bytes of weights held (packed size as stored).
  virtual uint64_t weight_bytes() const = 0;
  // The memory the KvStorage that Forward is given must live in: the allocator of the model's
  // backend (backends/backend.h). Host memory unless the model runs on a device.
  virtual Allocator& kv_allocator() const { return HostAllocator(); }
  // The backend whose memory holds StepOutput::logits when StepInput::logits_on_device, for ops
  // over them there (the sampling of ops/ops.h's SampleRows). Null where the logits always reach
  // the host: a backend whose memory is host memory (the CPU), or tensor parallelism (each rank
  // gathers them). The model owns it; valid while the model lives.
  virtual Backend* logits_backend() const { return nullptr; }

  // Runs one step. Every sequence's page table must cover its slots [0, kv_length + rows). On
  // success out->logits is [in.logits_rows.size(), vocab] f32 and out->hidden
  // [in.hidden_rows.size(), hidden_size] f32 (see StepOutput). Errors: InvalidArgument for a
  // malformed StepInput (models/step.h), token ids out of range or a chunk past max context;
  // ResourceExhausted when the step's activations or outputs do not fit the backend's memory (the
  // step's tensors are released, and a smaller step can run next). The KV slots the step would
  // have written are unspecified after a failure (the engine drops them).
  virtual Status Forward(const StepInput& in, KvStorage& kv, StepOutput* out) = 0;

  // Optional numerics checking (`--nan-check layers`), off by default. While on, Forward scans the
  // output rows of each op per chunk and records, for each chunk, the first op (in execution
  // order) whose output had a non-finite value in that chunk's rows. Rows of different sequences
  // are independent through the model, so one chunk's non-finite values never reach another's.
  // Returns false (and stays off) if the model does not support it.
  virtual bool SetNumericsCheck(bool on) { return !on; }
  // Per StepInput sequence of the last Forward, in order: the first site, or nullopt if all its
  // checked outputs were finite. Empty when checking is off.
  virtual std::vector<std::optional<NonFiniteSite>> LastNonFiniteSites() const { return {}; }

  // Start-up check of the weights a warm-up generation may not reach: runs every feed-forward
  // block of every layer (the dense MLP, each routed expert and the shared expert) on one finite
  // token through the Ops, without the router, and refuses non-finite outputs. InvalidArgument
  // naming the layer and expert ("layer 2 routed expert 5: ...") for the first one found; the
  // Ops' Synchronize error otherwise. Costs one pass over the feed-forward weights. Models that do
  // not implement it return OkStatus.
  virtual Status CheckFeedForwardWeights() { return OkStatus(); }
};

// Options for loading that are not part of the checkpoint.
struct ModelLoadOptions {
  // Override of index_topk (0 = from config); tests use it to compare sparse and dense attention.
  int64_t index_topk_override = 0;
  // Skip the DSA indexer and attend to every causal token (dense MLA), for comparisons. The
  // indexer's key cache is still sized but not written.
  bool force_dense_attention = false;
  // Tensor parallelism (models/deepseek_v3_shard.h): this process is rank tp->rank() of
  // tp->size() and loads only its shard; every rank runs every step (runtime/tp_step.h). Null or a
  // group of one: a single process. Borrowed: must outlive the model. Families whose registry row
  // has max_tensor_parallel 1 refuse a group larger than one.
  Communicator* tp = nullptr;
  // Under tensor parallelism, also check every step that the router's and the indexer's choices
  // are the same bytes on every rank (an all-gather per choice; Forward fails with Internal if
  // not). Tests turn it on; LUCID_TP_CHECK_REPLICATED=1 does for the commands.
  bool tp_check_replicated = false;
  // Expert parallelism over the tensor-parallel group (1, or tp->size()): each rank holds the
  // routed experts [rank * E/ep, (rank + 1) * E/ep) whole instead of a slice of every expert, runs
  // the tokens routed to them, and the partial outputs are summed by the MoE block's all-reduce.
  int ep_size = 1;
  // Data-parallel attention over the tensor-parallel group (--enable-dp-attention): the
  // attention weights are whole on every rank, and rank r runs attention (and writes KV) only for
  // the step's sequences whose pages are in its KV partition, global page ids
  // [r * P, (r + 1) * P) where P is the KvStorage's num_pages (runtime/engine.h kv_partitions),
  // mapped to its storage's [0, P). Attention rows of other ranks' sequences are zero on this rank
  // and come from theirs through the all-reduce after attention (one rank adds each row). The
  // dense MLP, shared experts, embedding and lm_head stay split as under TP, the routed experts
  // as ep_size says. Without a group of more than one it changes nothing (one rank holds every
  // request's KV either way).
  bool dp_attention = false;
  // Query rows the DSA indexer scores at a time (0: kIndexerRowBlock, models/
  // deepseek_v3_family.h); tests set it small to compare blocked and whole scoring.
  int64_t indexer_row_block = 0;
};

}  // namespace lucid

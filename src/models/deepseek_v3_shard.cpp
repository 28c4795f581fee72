#include "models/deepseek_v3_shard.h"

#include <cstring>
#include <string>

namespace lucid {
namespace {

Status Divisible(int64_t value, const char* what, int size) {
  if (size > 0 && value % size == 0) return OkStatus();
  return InvalidArgument(std::string("tensor parallelism: ") + what + " " + std::to_string(value) +
                         " does not divide into " + std::to_string(size) + " ranks (--tp-size)");
}

// Columns [byte_begin, byte_begin + bytes) of every row of the 2-D tensor t, as a new tensor.
Tensor CopyByteColumns(const Tensor& t, int64_t byte_begin, int64_t bytes, int64_t elem_cols) {
  const int64_t rows = t.size(0);
  const int64_t row_bytes = static_cast<int64_t>(t.nbytes()) / rows;
  Tensor out = Tensor::Empty(t.dtype(), {rows, elem_cols});
  const char* src = static_cast<const char*>(t.raw());
  char* dst = static_cast<char*>(out.raw());
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + r * bytes, src + r * row_bytes + byte_begin, bytes);
  return out;
}

// Input columns [begin, begin + count) of w (a whole matrix, not a row range), copied.
StatusOr<Weight> ColumnRange(const Weight& w, int64_t begin, int64_t count) {
  if (w.row_begin != 0 || w.data.size(0) != w.rows)
    return Internal("tensor parallelism: column shard of the row range " + w.name);
  Weight out = w;
  out.cols = count;
  auto cut = [&](int64_t block, const char* kind) -> Status {
    if (begin % block == 0 && (count % block == 0 || begin + count == w.cols)) return OkStatus();
    return InvalidArgument("tensor parallelism: " + w.name + " would be split at input column " +
                           std::to_string(begin) + ", inside a " + kind + " of " +
                           std::to_string(block) + " columns (its input dimension " +
                           std::to_string(w.cols) + " into shards of " + std::to_string(count) +
                           "); use a --tp-size whose shards are whole blocks");
  };
  switch (w.format) {
    case WeightFormat::kF32:
    case WeightFormat::kBF16: {
      const int64_t eb = w.format == WeightFormat::kF32 ? 4 : 2;
      out.data = CopyByteColumns(w.data, begin * eb, count * eb, count);
      return out;
    }
    case WeightFormat::kFp8Block: {
      LUCID_RETURN_IF_ERROR(cut(w.block_cols, "FP8 scale block"));
      out.data = CopyByteColumns(w.data, begin, count, count);
      const int64_t sb = (count + w.block_cols - 1) / w.block_cols;
      const int64_t se = DTypeBits(w.scale.dtype()) / 8;
      out.scale = CopyByteColumns(w.scale, begin / w.block_cols * se, sb * se, sb);
      return out;
    }
    case WeightFormat::kNvfp4: {
      LUCID_RETURN_IF_ERROR(cut(w.block_cols, "NVFP4 scale group"));
      const int64_t groups = (count + w.block_cols - 1) / w.block_cols;
      out.data =
          CopyByteColumns(w.data, begin / 2, groups * w.block_cols / 2, groups * w.block_cols / 2);
      out.scale = CopyByteColumns(w.scale, begin / w.block_cols, groups, groups);
      return out;
    }
    case WeightFormat::kGgml:
      break;
  }
  return Unimplemented("tensor parallelism: " + w.name + " is GGUF-packed; it cannot be sharded");
}

// Row shard `rank` of `size` of w (rows divide evenly: checked by the caller's dimension).
Weight RowShard(const Weight& w, int rank, int size) {
  const int64_t n = w.rows / size;
  return w.RowRange(rank * n, n);
}

// gate/up by rows, down by input columns: the shard's output is a partial sum.
Status ShardMlp(const char* what, int rank, int size, MlpWeights* m) {
  const int64_t inter = m->gate.rows;
  LUCID_RETURN_IF_ERROR(Divisible(inter, what, size));
  const int64_t n = inter / size;
  m->gate = RowShard(m->gate, rank, size);
  m->up = RowShard(m->up, rank, size);
  LUCID_ASSIGN_OR_RETURN(m->down, ColumnRange(m->down, rank * n, n));
  return OkStatus();
}

// Bytes of the weights this rank holds (row ranges and column copies as held; vectors whole).
uint64_t HeldBytes(const DeepseekV3Weights& w) {
  uint64_t b = 0;
  auto weight = [&](const Weight& x) { b += x.valid() ? x.StoredBytes() : 0; };
  auto tensor = [&](const Tensor& t) { b += t.raw() != nullptr ? t.nbytes() : 0; };
  auto mlp = [&](const MlpWeights& m) {
    for (const Weight* x : {&m.gate, &m.up, &m.down}) weight(*x);
  };
  weight(w.embed);
  if (w.lm_head.data.raw() != w.embed.data.raw() || w.lm_head.row_begin != w.embed.row_begin)
    weight(w.lm_head);
  tensor(w.final_norm);
  for (const LayerWeights& L : w.layers) {
    for (const Tensor* t : {&L.input_norm, &L.post_attn_norm, &L.attn.q_a_norm, &L.attn.kv_a_norm,
                            &L.indexer.k_norm_w, &L.indexer.k_norm_b})
      tensor(*t);
    for (const Weight* x :
         {&L.attn.q_a, &L.attn.q_b, &L.attn.q_proj, &L.attn.kv_a, &L.attn.kv_b, &L.attn.o,
          &L.indexer.wq_b, &L.indexer.wk, &L.indexer.weights_proj, &L.moe.router})
      weight(*x);
    mlp(L.dense);
    mlp(L.moe.shared);
    for (const ExpertWeights& e : L.moe.experts) mlp(MlpWeights{e.gate, e.up, e.down});
  }
  return b;
}

}  // namespace

Status ShardDeepseekV3Weights(const ModelConfig& c, int rank, int size, int ep_size,
                              bool dp_attention, DeepseekV3Weights* w) {
  if (size <= 1) return OkStatus();
  if (ep_size != 1 && ep_size != size)
    return InvalidArgument("expert parallelism: --ep-size " + std::to_string(ep_size) +
                           " must be 1 or the tensor-parallel size " + std::to_string(size));
  if (ep_size > 1)
    LUCID_RETURN_IF_ERROR(Divisible(c.n_routed_experts, "n_routed_experts", ep_size));
  if (rank < 0 || rank >= size) return Internal("tensor parallelism: rank outside the group");
  const int64_t H = c.num_attention_heads, dv = c.v_head_dim;
  if (!dp_attention) LUCID_RETURN_IF_ERROR(Divisible(H, "num_attention_heads", size));
  LUCID_RETURN_IF_ERROR(Divisible(c.vocab_size, "vocab_size", size));
  const int64_t Hl = H / size;
  const bool tied = w->lm_head.data.raw() == w->embed.data.raw();
  w->embed = RowShard(w->embed, rank, size);
  w->lm_head = tied ? w->embed : RowShard(w->lm_head, rank, size);
  for (LayerWeights& L : w->layers) {
    MlaWeights& a = L.attn;
    if (!dp_attention) {  // data-parallel attention keeps every head
      if (a.q_b.valid()) a.q_b = RowShard(a.q_b, rank, size);
      if (a.q_proj.valid()) a.q_proj = RowShard(a.q_proj, rank, size);
      a.kv_b = RowShard(a.kv_b, rank, size);
      LUCID_ASSIGN_OR_RETURN(a.o, ColumnRange(a.o, rank * Hl * dv, Hl * dv));
    }
    if (!L.is_moe) {
      LUCID_RETURN_IF_ERROR(ShardMlp("intermediate_size", rank, size, &L.dense));
      continue;
    }
    const int64_t E = static_cast<int64_t>(L.moe.experts.size()), per = E / ep_size;
    for (int64_t i = 0; i < E && ep_size > 1; ++i)
      if (i / per != rank) L.moe.experts[i] = ExpertWeights{};  // another rank's expert
    for (ExpertWeights& e : L.moe.experts) {
      if (ep_size > 1) continue;  // whole experts
      MlpWeights m{e.gate, e.up, e.down};
      LUCID_RETURN_IF_ERROR(ShardMlp("moe_intermediate_size", rank, size, &m));
      e = ExpertWeights{m.gate, m.up, m.down};
    }
    if (c.n_shared_experts > 0)
      LUCID_RETURN_IF_ERROR(
          ShardMlp("moe_intermediate_size x n_shared_experts", rank, size, &L.moe.shared));
  }
  w->bytes = HeldBytes(*w);
  return OkStatus();
}

}  // namespace lucid

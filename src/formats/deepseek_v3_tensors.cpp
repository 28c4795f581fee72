#include "formats/deepseek_v3_tensors.h"

#include <cctype>
#include <utility>

namespace lucid {
namespace {

using K = TensorKind;
using R = ShardRole;

bool Moe(const ModelConfig& c, int64_t l) {
  return l < static_cast<int64_t>(c.layer_is_moe.size()) && c.layer_is_moe[l];
}
bool Dense(const ModelConfig& c, int64_t l) { return !Moe(c, l); }
bool Indexer(const ModelConfig& c, int64_t l) {
  return c.has_indexer && l < static_cast<int64_t>(c.layer_runs_indexer.size()) &&
         c.layer_runs_indexer[l];
}
bool QLora(const ModelConfig& c, int64_t) { return c.q_lora_rank > 0; }
bool NoQLora(const ModelConfig& c, int64_t) { return c.q_lora_rank <= 0; }
bool Shared(const ModelConfig& c, int64_t l) { return Moe(c, l) && c.n_shared_experts > 0; }
bool Always(const ModelConfig&, int64_t) { return true; }

int64_t SharedWidth(const ModelConfig& c) { return c.moe_intermediate_size * c.n_shared_experts; }

const std::vector<TensorRow> kTable = {
    {"model.embed_tokens.weight", K::kEmbedding, false, R::kVocabulary,
     [](const ModelConfig& c) {
       return Shape{c.vocab_size, c.hidden_size};
     },
     nullptr},
    {"model.norm.weight", K::kNormWeight, false, R::kReplicated,
     [](const ModelConfig& c) { return Shape{c.hidden_size}; }, nullptr},
    {"lm_head.weight", K::kLinear, false, R::kVocabulary,
     [](const ModelConfig& c) {
       return Shape{c.vocab_size, c.hidden_size};
     },
     nullptr},
    {"model.layers.{L}.input_layernorm.weight", K::kNormWeight, false, R::kReplicated,
     [](const ModelConfig& c) { return Shape{c.hidden_size}; }, Always},
    {"model.layers.{L}.post_attention_layernorm.weight", K::kNormWeight, false, R::kReplicated,
     [](const ModelConfig& c) { return Shape{c.hidden_size}; }, Always},
    {"model.layers.{L}.self_attn.q_a_proj.weight", K::kLinear, true, R::kReplicated,
     [](const ModelConfig& c) {
       return Shape{c.q_lora_rank, c.hidden_size};
     },
     QLora},
    {"model.layers.{L}.self_attn.q_a_layernorm.weight", K::kNormWeight, false, R::kReplicated,
     [](const ModelConfig& c) { return Shape{c.q_lora_rank}; }, QLora},
    {"model.layers.{L}.self_attn.q_b_proj.weight", K::kLinear, true, R::kSplitRows,
     [](const ModelConfig& c) {
       return Shape{c.num_attention_heads * c.qk_head_dim(), c.q_lora_rank};
     },
     QLora},
    {"model.layers.{L}.self_attn.q_proj.weight", K::kLinear, true, R::kSplitRows,
     [](const ModelConfig& c) {
       return Shape{c.num_attention_heads * c.qk_head_dim(), c.hidden_size};
     },
     NoQLora},
    {"model.layers.{L}.self_attn.kv_a_proj_with_mqa.weight", K::kLinear, true, R::kReplicated,
     [](const ModelConfig& c) {
       return Shape{c.kv_lora_rank + c.qk_rope_head_dim, c.hidden_size};
     },
     Always},
    {"model.layers.{L}.self_attn.kv_a_layernorm.weight", K::kNormWeight, false, R::kReplicated,
     [](const ModelConfig& c) { return Shape{c.kv_lora_rank}; }, Always},
    {"model.layers.{L}.self_attn.kv_b_proj.weight", K::kLinear, true, R::kSplitRows,
     [](const ModelConfig& c) {
       return Shape{c.num_attention_heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank};
     },
     Always},
    {"model.layers.{L}.self_attn.o_proj.weight", K::kLinear, true, R::kSplitColumns,
     [](const ModelConfig& c) {
       return Shape{c.hidden_size, c.num_attention_heads * c.v_head_dim};
     },
     Always},
    {"model.layers.{L}.self_attn.indexer.wq_b.weight", K::kLinear, true, R::kReplicated,
     [](const ModelConfig& c) {
       return Shape{c.index_n_heads * c.index_head_dim, c.q_lora_rank};
     },
     Indexer},
    {"model.layers.{L}.self_attn.indexer.wk.weight", K::kLinear, true, R::kReplicated,
     [](const ModelConfig& c) {
       return Shape{c.index_head_dim, c.hidden_size};
     },
     Indexer},
    {"model.layers.{L}.self_attn.indexer.k_norm.weight", K::kNormWeight, false, R::kReplicated,
     [](const ModelConfig& c) { return Shape{c.index_head_dim}; }, Indexer},
    {"model.layers.{L}.self_attn.indexer.k_norm.bias", K::kNormBias, false, R::kReplicated,
     [](const ModelConfig& c) { return Shape{c.index_head_dim}; }, Indexer},
    // Kept in high precision by every quantizer (DeepSeek's and ModelOpt's exports).
    {"model.layers.{L}.self_attn.indexer.weights_proj.weight", K::kLinear, false, R::kReplicated,
     [](const ModelConfig& c) {
       return Shape{c.index_n_heads, c.hidden_size};
     },
     Indexer},
    {"model.layers.{L}.mlp.gate_proj.weight", K::kLinear, true, R::kSplitRows,
     [](const ModelConfig& c) {
       return Shape{c.intermediate_size, c.hidden_size};
     },
     Dense},
    {"model.layers.{L}.mlp.up_proj.weight", K::kLinear, true, R::kSplitRows,
     [](const ModelConfig& c) {
       return Shape{c.intermediate_size, c.hidden_size};
     },
     Dense},
    {"model.layers.{L}.mlp.down_proj.weight", K::kLinear, true, R::kSplitColumns,
     [](const ModelConfig& c) {
       return Shape{c.hidden_size, c.intermediate_size};
     },
     Dense},
    {"model.layers.{L}.mlp.gate.weight", K::kRouter, false, R::kReplicated,
     [](const ModelConfig& c) {
       return Shape{c.n_routed_experts, c.hidden_size};
     },
     Moe},
    {"model.layers.{L}.mlp.gate.e_score_correction_bias", K::kRouterBias, false, R::kReplicated,
     [](const ModelConfig& c) { return Shape{c.n_routed_experts}; }, Moe},
    {"model.layers.{L}.mlp.experts.{E}.gate_proj.weight", K::kLinear, true, R::kPerExpert,
     [](const ModelConfig& c) {
       return Shape{c.moe_intermediate_size, c.hidden_size};
     },
     Moe},
    {"model.layers.{L}.mlp.experts.{E}.up_proj.weight", K::kLinear, true, R::kPerExpert,
     [](const ModelConfig& c) {
       return Shape{c.moe_intermediate_size, c.hidden_size};
     },
     Moe},
    {"model.layers.{L}.mlp.experts.{E}.down_proj.weight", K::kLinear, true, R::kPerExpert,
     [](const ModelConfig& c) {
       return Shape{c.hidden_size, c.moe_intermediate_size};
     },
     Moe},
    {"model.layers.{L}.mlp.shared_experts.gate_proj.weight", K::kLinear, true, R::kSplitRows,
     [](const ModelConfig& c) {
       return Shape{SharedWidth(c), c.hidden_size};
     },
     Shared},
    {"model.layers.{L}.mlp.shared_experts.up_proj.weight", K::kLinear, true, R::kSplitRows,
     [](const ModelConfig& c) {
       return Shape{SharedWidth(c), c.hidden_size};
     },
     Shared},
    {"model.layers.{L}.mlp.shared_experts.down_proj.weight", K::kLinear, true, R::kSplitColumns,
     [](const ModelConfig& c) {
       return Shape{c.hidden_size, SharedWidth(c)};
     },
     Shared},
};

// `pattern` with {L} and {E} replaced.
std::string Expand(const char* pattern, int64_t l, int64_t e) {
  std::string s = pattern;
  for (auto [key, v] : {std::pair<const char*, int64_t>{"{L}", l}, {"{E}", e}}) {
    const size_t at = s.find(key);
    if (at != std::string::npos) s.replace(at, 3, std::to_string(v));
  }
  return s;
}

// Matches `name` against `pattern`, a placeholder standing for a run of digits; *layer gets
// {L}'s value.
bool Match(const char* pattern, const std::string& name, int64_t* layer) {
  size_t i = 0;
  for (const char* p = pattern; *p != '\0';) {
    if (p[0] == '{' && (p[1] == 'L' || p[1] == 'E') && p[2] == '}') {
      const size_t start = i;
      while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
      if (i == start) return false;
      if (p[1] == 'L') *layer = std::stoll(name.substr(start, i - start));
      p += 3;
      continue;
    }
    if (i >= name.size() || name[i] != *p) return false;
    ++i;
    ++p;
  }
  return i == name.size();
}

}  // namespace

const char* ShardRoleName(ShardRole r) {
  switch (r) {
    case ShardRole::kReplicated:
      return "replicated";
    case ShardRole::kSplitRows:
      return "split-rows";
    case ShardRole::kSplitColumns:
      return "split-columns";
    case ShardRole::kVocabulary:
      return "vocabulary";
    case ShardRole::kPerExpert:
      return "per-expert";
  }
  return "?";
}

const std::vector<TensorRow>& DeepseekV3TensorTable() { return kTable; }

std::string TensorSpec::Module() const {
  const std::string suffix = ".weight";
  if (row != nullptr && row->kind == TensorKind::kLinear && name.size() > suffix.size() &&
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
    return name.substr(0, name.size() - suffix.size());
  return name;
}

std::vector<TensorSpec> DeepseekV3LayerTensors(const ModelConfig& c, int64_t l) {
  std::vector<TensorSpec> out;
  for (const TensorRow& r : kTable) {
    if ((r.present == nullptr) != (l < 0)) continue;
    if (r.present != nullptr && !r.present(c, l)) continue;
    if (r.role == ShardRole::kPerExpert) {
      for (int64_t e = 0; e < c.n_routed_experts; ++e)
        out.push_back({Expand(r.pattern, l, e), r.shape(c), &r, l, e});
    } else {
      out.push_back({Expand(r.pattern, l, -1), r.shape(c), &r, l, -1});
    }
  }
  return out;
}

std::vector<TensorSpec> DeepseekV3Tensors(const ModelConfig& c) {
  std::vector<TensorSpec> out = DeepseekV3LayerTensors(c, -1);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    std::vector<TensorSpec> layer = DeepseekV3LayerTensors(c, l);
    out.insert(out.end(), layer.begin(), layer.end());
  }
  return out;
}

const TensorRow* FindTensorRow(const std::string& name, int64_t* layer) {
  for (const TensorRow& r : kTable) {
    int64_t l = -1;
    if (Match(r.pattern, name, &l)) {
      if (layer != nullptr) *layer = l;
      return &r;
    }
  }
  return nullptr;
}

}  // namespace lucid

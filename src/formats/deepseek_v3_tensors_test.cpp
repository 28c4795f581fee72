// The family's tensor table against checkpoints written by transformers (the tiny fixtures of
// all three architectures, bf16 and f32): the table lists exactly the tensors the checkpoint holds
// for the layers lucid loads, with the shapes it stores, and FindTensorRow classifies each name
// back to its row.
#include "formats/deepseek_v3_tensors.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "formats/safetensors.h"

namespace lucid {
namespace {

std::string Fixture(const std::string& name) {
  return std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/models/" + name;
}

TEST(DeepseekV3TensorsTest, TheTableIsWhatTransformersWrites) {
  for (const char* name : {"tiny_glm_moe_dsa", "tiny_deepseek_v32", "tiny_deepseek_v3"}) {
    SCOPED_TRACE(name);
    auto c = LoadModelConfig(Fixture(name));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    auto ck = Checkpoint::Open(Fixture(name));
    ASSERT_TRUE(ck.ok()) << ck.status().ToString();
    std::map<std::string, Shape> stored;
    for (const std::string& n : ck->Names()) {
      int64_t layer = -1;
      const TensorRow* row = FindTensorRow(n, &layer);
      ASSERT_NE(row, nullptr) << n << " is in the checkpoint but not in the table";
      if (layer >= c->num_hidden_layers) continue;  // the MTP layer: not loaded
      stored[n] = ck->Info(n)->shape;
    }
    std::map<std::string, Shape> table;
    for (const TensorSpec& t : DeepseekV3Tensors(*c)) {
      EXPECT_TRUE(table.emplace(t.name, t.shape).second) << "listed twice: " << t.name;
      int64_t layer = -2;
      EXPECT_EQ(FindTensorRow(t.name, &layer), t.row) << t.name;
      EXPECT_EQ(layer, t.layer) << t.name;
    }
    EXPECT_EQ(table, stored);
  }
}

TEST(DeepseekV3TensorsTest, RolesAndQuantizability) {
  struct Want {
    const char* name;
    ShardRole role;
    bool quantizable;
  };
  for (const Want& w :
       {Want{"model.embed_tokens.weight", ShardRole::kVocabulary, false},
        Want{"lm_head.weight", ShardRole::kVocabulary, false},
        Want{"model.layers.2.self_attn.q_b_proj.weight", ShardRole::kSplitRows, true},
        Want{"model.layers.2.self_attn.o_proj.weight", ShardRole::kSplitColumns, true},
        Want{"model.layers.2.self_attn.q_a_proj.weight", ShardRole::kReplicated, true},
        Want{"model.layers.2.self_attn.indexer.weights_proj.weight", ShardRole::kReplicated, false},
        Want{"model.layers.2.mlp.gate.weight", ShardRole::kReplicated, false},
        Want{"model.layers.2.mlp.experts.17.down_proj.weight", ShardRole::kPerExpert, true},
        Want{"model.layers.2.mlp.shared_experts.down_proj.weight", ShardRole::kSplitColumns, true},
        Want{"model.layers.0.input_layernorm.weight", ShardRole::kReplicated, false}}) {
    const TensorRow* r = FindTensorRow(w.name);
    ASSERT_NE(r, nullptr) << w.name;
    EXPECT_EQ(r->role, w.role) << w.name << ": " << ShardRoleName(r->role);
    EXPECT_EQ(r->quantizable, w.quantizable) << w.name;
  }
  EXPECT_EQ(FindTensorRow("model.layers.2.mlp.experts.x.down_proj.weight"), nullptr);
  EXPECT_EQ(FindTensorRow("model.layers.2.self_attn.q_b_proj.weight_scale"), nullptr);
}

}  // namespace
}  // namespace lucid

#include "formats/quantize_checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/dtype.h"
#include "formats/deepseek_v3_tensors.h"
#include "formats/model_config.h"
#include "formats/quant_encode.h"
#include "formats/safetensors.h"

namespace lucid {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Tensors the family's table (formats/deepseek_v3_tensors.h) does not list (the MTP layer's):
// kept by name like the table's unquantizable ones (its embed_tokens and shared_head.head).
const char* const kAlwaysKeep[] = {"lm_head", "*embed_tokens", "*.mlp.gate",
                                   "*.indexer.weights_proj", "*.shared_head.head"};
const char* const kNvfp4AlsoKeep[] = {"*.indexer.wk"};

std::string ModuleOf(const std::string& name) {
  return name.substr(0, name.size() - std::string(".weight").size());
}

// Modules that read the same input share NVFP4's weight_scale_2 (ModelOpt's exporter unifies
// them so that fused serving kernels can run them as one GEMM). Key "" = not shared.
std::string SharedInputGroup(const std::string& module) {
  auto ends = [&](const std::string& suffix) {
    return module.size() >= suffix.size() &&
           module.compare(module.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  auto parent = [&](const std::string& suffix) {
    return module.substr(0, module.size() - suffix.size());
  };
  if (ends(".gate_proj")) return parent(".gate_proj") + "|gate_up";
  if (ends(".up_proj")) return parent(".up_proj") + "|gate_up";
  if (ends(".self_attn.q_a_proj")) return parent(".q_a_proj") + "|hidden";
  if (ends(".self_attn.kv_a_proj_with_mqa")) return parent(".kv_a_proj_with_mqa") + "|hidden";
  if (ends(".self_attn.indexer.wk")) return parent(".indexer.wk") + "|hidden";
  if (ends(".self_attn.indexer.weights_proj")) return parent(".indexer.weights_proj") + "|hidden";
  if (ends(".self_attn.q_b_proj")) return parent(".q_b_proj") + "|cq";
  if (ends(".self_attn.indexer.wq_b")) return parent(".indexer.wq_b") + "|cq";
  return "";
}

std::vector<float> ToF32(const Tensor& t) {
  std::vector<float> v(t.numel());
  ConvertToF32(t.dtype(), t.raw(), v.data(), v.size());
  return v;
}

struct Plan {
  std::string name;
  QuantScheme scheme = QuantScheme::kNone;
  Shape shape;
  uint64_t out_bytes = 0;  // this tensor's output bytes incl. its scales
};

uint64_t OutBytes(const Plan& p, const TensorInfo& info) {
  if (p.scheme == QuantScheme::kNone) return info.data_end - info.data_begin;
  const int64_t r = p.shape[0], c = p.shape[1];
  if (p.scheme == QuantScheme::kNvfp4) return r * ((c + 15) / 16) * 9 + 4;
  return r * c + 4 * ((r + 127) / 128) * ((c + 127) / 128);
}

Status WriteText(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
  if (!f) return Internal("cannot write " + p.string());
  return OkStatus();
}

// Appends the output tensors of one planned input tensor.
Status Produce(const Checkpoint& in, const Plan& p, float scale2,
               std::vector<std::pair<std::string, Tensor>>* out) {
  LUCID_ASSIGN_OR_RETURN(Tensor t, in.Get(p.name));
  if (p.scheme == QuantScheme::kNone) {
    out->push_back({p.name, t});
    return OkStatus();
  }
  const int64_t r = p.shape[0], c = p.shape[1];
  const std::vector<float> w = ToF32(t);
  const std::string m = ModuleOf(p.name);
  if (p.scheme == QuantScheme::kNvfp4) {
    const int64_t g = (c + 15) / 16;
    Tensor q = Tensor::Zeros(DType::kU8, {r, g * 8});  // a padded last group stays 0
    Tensor s = Tensor::Empty(DType::kF8E4M3, {r, g});
    Tensor s2 = Tensor::Empty(DType::kF32, {});
    *s2.data<float>() = scale2;
    QuantizeNvfp4(w.data(), r, c, scale2, q.data<uint8_t>(), s.data<uint8_t>());
    out->push_back({m + ".weight", q});
    out->push_back({m + ".weight_scale", s});
    out->push_back({m + ".weight_scale_2", s2});
    return OkStatus();
  }
  return Internal("Produce: FP8 is handled by ProduceFp8");
}

Status ProduceFp8(const Checkpoint& in, const Plan& p, bool ue8m0,
                  std::vector<std::pair<std::string, Tensor>>* out) {
  LUCID_ASSIGN_OR_RETURN(Tensor t, in.Get(p.name));
  const int64_t r = p.shape[0], c = p.shape[1];
  const std::vector<float> w = ToF32(t);
  Tensor q = Tensor::Empty(DType::kF8E4M3, {r, c});
  Tensor s = Tensor::Empty(DType::kF32, {(r + 127) / 128, (c + 127) / 128});
  QuantizeFp8Block(w.data(), r, c, 128, 128, ue8m0, q.data<uint8_t>(), s.data<float>());
  out->push_back({ModuleOf(p.name) + ".weight", q});
  out->push_back({ModuleOf(p.name) + ".weight_scale_inv", s});
  return OkStatus();
}

// weight_scale_2 per NVFP4 module: its own global scale, or the max over its shared-input group.
StatusOr<std::map<std::string, float>> GlobalScales(const Checkpoint& in,
                                                    const std::vector<Plan>& plans) {
  std::map<std::string, float> own, group_max, out;
  for (const Plan& p : plans) {
    if (p.scheme != QuantScheme::kNvfp4) continue;
    LUCID_ASSIGN_OR_RETURN(Tensor t, in.Get(p.name));
    const std::vector<float> w = ToF32(t);
    const float s = Nvfp4GlobalScale(w.data(), w.size());
    own[p.name] = s;
    const std::string g = SharedInputGroup(ModuleOf(p.name));
    if (!g.empty()) group_max[g] = std::max(group_max[g], s);
  }
  for (auto& [name, s] : own) {
    const std::string g = SharedInputGroup(ModuleOf(name));
    out[name] = g.empty() ? s : group_max[g];
  }
  return out;
}

json QuantizationConfigJson(const QuantizeOptions& o, const std::vector<std::string>& kept) {
  if (o.scheme == QuantScheme::kNvfp4) {
    json group = {{"dynamic", false}, {"num_bits", 4}, {"type", "float"}, {"group_size", 16}};
    return {{"config_groups",
             {{"group_0",
               {{"input_activations", group}, {"weights", group}, {"targets", {"Linear"}}}}}},
            {"ignore", kept},
            {"quant_algo", "NVFP4"},
            {"producer", {{"name", "lucid"}, {"version", "quantize/1"}}},
            {"quant_method", "modelopt"}};
  }
  json q = {{"activation_scheme", "dynamic"},
            {"fmt", "e4m3"},
            {"quant_method", "fp8"},
            {"weight_block_size", {128, 128}}};
  if (!o.fp8_float_scales) q["scale_fmt"] = "ue8m0";
  if (!kept.empty()) q["modules_to_not_convert"] = kept;
  return q;
}

}  // namespace

QuantScheme QuantizeTarget(const std::string& name, const Shape& shape, QuantScheme scheme,
                           const std::vector<std::string>& exclude, std::string* pattern) {
  const std::string suffix = ".weight";
  if (shape.size() != 2 || name.size() <= suffix.size() ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return QuantScheme::kNone;
  const std::string m = ModuleOf(name);
  auto hit = [&](const std::string& p) {
    if (!ModulePatternMatch(p, m)) return false;
    if (pattern) *pattern = p;
    return true;
  };
  // A tensor of the family's table is quantized when the table says it may be (a Linear, not
  // lm_head, the router or the indexer's weights_proj).
  if (const TensorRow* row = FindTensorRow(name); row != nullptr) {
    if (row->kind != TensorKind::kLinear || !row->quantizable) {
      if (pattern) *pattern = "(not quantizable: " + std::string(row->pattern) + ")";
      return QuantScheme::kNone;
    }
  } else {
    for (const char* p : kAlwaysKeep)
      if (hit(p)) return QuantScheme::kNone;
  }
  if (scheme == QuantScheme::kNvfp4)
    for (const char* p : kNvfp4AlsoKeep)
      if (hit(p)) return QuantScheme::kNone;
  for (const std::string& p : exclude)
    if (hit(p)) return QuantScheme::kNone;
  return scheme;
}

Status QuantizeCheckpoint(const std::string& in_dir, const std::string& out_dir,
                          const QuantizeOptions& o) {
  if (o.scheme == QuantScheme::kNone) return InvalidArgument("quantize: no scheme given");
  LUCID_ASSIGN_OR_RETURN(json config, ReadJsonFile(in_dir + "/config.json"));
  LUCID_ASSIGN_OR_RETURN(QuantConfig existing, LoadQuantConfig(in_dir, config));
  if (existing.scheme != QuantScheme::kNone)
    return FailedPrecondition(in_dir + " is already quantized (" + existing.Describe() +
                              "); quantize an unquantized checkpoint");
  LUCID_ASSIGN_OR_RETURN(Checkpoint in, Checkpoint::Open(in_dir));
  std::error_code ec;
  if (fs::exists(out_dir, ec) && !(fs::is_directory(out_dir, ec) && fs::is_empty(out_dir, ec)))
    return FailedPrecondition(out_dir + " exists and is not an empty directory");
  const std::vector<std::string> names = in.Names();
  for (const std::string& p : o.exclude)
    if (std::none_of(names.begin(), names.end(),
                     [&](const std::string& n) { return ModulePatternMatch(p, n); }))
      return InvalidArgument("--exclude \"" + p + "\" names no tensor of " + in_dir);
  // Plan: scheme per tensor, shards by output size.
  std::vector<Plan> plans;
  std::vector<std::string> kept;  // Linear modules left in the input precision
  for (const std::string& n : names) {
    LUCID_ASSIGN_OR_RETURN(TensorInfo info, in.Info(n));
    Plan p{n, QuantizeTarget(n, info.shape, o.scheme, o.exclude), info.shape, 0};
    if (p.scheme != QuantScheme::kNone && !IsFloatingPoint(info.dtype))
      return InvalidArgument("quantize: tensor " + n + " has dtype " + DTypeName(info.dtype));
    if (p.scheme == QuantScheme::kNone && info.shape.size() == 2 && n.size() > 7 &&
        n.compare(n.size() - 7, 7, ".weight") == 0)
      kept.push_back(ModuleOf(n));
    p.out_bytes = OutBytes(p, info);
    plans.push_back(p);
  }
  std::vector<std::vector<size_t>> shards(1);
  uint64_t cur = 0, total = 0;
  for (size_t i = 0; i < plans.size(); ++i) {
    if (cur > 0 && cur + plans[i].out_bytes > o.max_shard_bytes) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().push_back(i);
    cur += plans[i].out_bytes;
    total += plans[i].out_bytes;
  }
  std::map<std::string, float> scale2;
  if (o.scheme == QuantScheme::kNvfp4) {
    LUCID_ASSIGN_OR_RETURN(scale2, GlobalScales(in, plans));
  }
  fs::create_directories(out_dir, ec);
  if (ec) return Internal("cannot create " + out_dir + ": " + ec.message());
  json weight_map = json::object();
  size_t done = 0;
  char shard_name[64];
  for (size_t s = 0; s < shards.size(); ++s) {
    std::snprintf(shard_name, sizeof shard_name, "model-%05zu-of-%05zu.safetensors", s + 1,
                  shards.size());
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (size_t i : shards[s]) {
      const Plan& p = plans[i];
      if (p.scheme == QuantScheme::kFp8Block) {
        LUCID_RETURN_IF_ERROR(ProduceFp8(in, p, !o.fp8_float_scales, &tensors));
      } else {
        LUCID_RETURN_IF_ERROR(
            Produce(in, p, p.scheme == QuantScheme::kNvfp4 ? scale2[p.name] : 0.0f, &tensors));
      }
      if (o.progress) o.progress(++done, plans.size(), p.name);
    }
    std::sort(tensors.begin(), tensors.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& t : tensors) weight_map[t.first] = shard_name;
    LUCID_RETURN_IF_ERROR(
        WriteSafetensors(out_dir + "/" + shard_name, tensors, {{"format", "pt"}}));
  }
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  LUCID_RETURN_IF_ERROR(WriteText(out_dir + "/model.safetensors.index.json", index.dump(2) + "\n"));
  config["quantization_config"] = QuantizationConfigJson(o, kept);
  LUCID_RETURN_IF_ERROR(WriteText(out_dir + "/config.json", config.dump(2) + "\n"));
  if (o.scheme == QuantScheme::kNvfp4) {
    json hq = {{"producer", {{"name", "lucid"}, {"version", "quantize/1"}}},
               {"quantization",
                {{"quant_algo", "NVFP4"},
                 {"kv_cache_quant_algo", nullptr},
                 {"group_size", 16},
                 {"exclude_modules", kept}}}};
    LUCID_RETURN_IF_ERROR(WriteText(out_dir + "/hf_quant_config.json", hq.dump(4) + "\n"));
  }
  for (const auto& e : fs::directory_iterator(in_dir, ec)) {
    const std::string f = e.path().filename().string();
    if (!e.is_regular_file() || f == "config.json" || f == "hf_quant_config.json" ||
        f == "model.safetensors.index.json" || e.path().extension() == ".safetensors")
      continue;
    fs::copy_file(e.path(), fs::path(out_dir) / f, fs::copy_options::overwrite_existing, ec);
    if (ec) return Internal("cannot copy " + e.path().string() + ": " + ec.message());
  }
  return OkStatus();
}

}  // namespace lucid

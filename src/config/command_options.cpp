// The tools' own rows of the option table (option_table.h): the arguments of generate, bench,
// synth, quantize, align and backends, and explain's --json. They are not plan settings: the
// command reads them from its explicit settings with the table's default (ExplicitSettings::
// ValueOrDefault), and no resolver rule touches them. The plan options these tools take too
// (model-path, kv-cache-dtype, cpu-kernels, page-size) are marked in option_table.cpp.
#include "config/option_table.h"

namespace lucid::config {
namespace {

OptionSpec Row(std::string name, OptionType type, std::string def, CommandSet commands,
               std::string group, std::string help) {
  OptionSpec o;
  o.name = std::move(name);
  o.type = type;
  o.default_text = std::move(def);
  o.commands = commands;
  o.group = std::move(group);
  o.help = std::move(help);
  return o;
}

OptionSpec Ranged(OptionSpec o, double lo, double hi) {
  o.min = lo;
  o.max = hi;
  return o;
}

OptionSpec OneOf(OptionSpec o, std::vector<std::string> allowed) {
  o.type = OptionType::kEnum;
  o.allowed = std::move(allowed);
  return o;
}

}  // namespace

void AppendCommandOptions(std::vector<OptionSpec>& t) {
  using T = OptionType;
  const std::string kGen = "Generate", kBenchG = "Bench", kSynthG = "Synth", kQuantG = "Quantize",
                    kOut = "Output", kSelf = "Backends";
  // generate
  t.push_back(Row("prompt-ids", T::kString, "", kGenerate, kGen,
                  "Comma-separated prompt token ids (prints the new ids)"));
  t.push_back(Row("prompt", T::kString, "", kGenerate, kGen,
                  "Prompt text, encoded by the model's tokenizer (prints the new text)"));
  t.push_back(Row("chat", T::kBool, "false", kGenerate, kGen,
                  "Send --prompt as a user turn through the model's chat template"));
  t.push_back(Ranged(Row("max-new-tokens", T::kInt, "16", kGenerate, kGen, "Tokens to generate"), 0,
                     1 << 20));
  t.push_back(
      OneOf(Row("output", T::kString, "text", kGenerate, kGen, "Output format"), {"text", "json"}));
  t.push_back(Row("dump-logits", T::kString, "", kGenerate, kGen,
                  "Write the prompt's logits [prompt_len, vocab] as float32 .npy"));
  // bench
  t.push_back(
      Row("batch", T::kString, "1,8,32", kBench, kBenchG, "Decode batch sizes, comma-separated"));
  t.push_back(Ranged(
      Row("prompt-len", T::kInt, "512", kBench, kBenchG, "Prefill length and decode context"), 1,
      1 << 20));
  t.push_back(Ranged(Row("gen-len", T::kInt, "8", kBench, kBenchG,
                         "Timed decode steps per configuration (after one warm-up)"),
                     1, 1 << 16));
  t.push_back(Row("context", T::kString, "", kBench, kBenchG,
                  "Context sweep, e.g. 1k,4k,16k,32k (DSA vs dense; default: none)"));
  t.push_back(
      Ranged(Row("repeats", T::kInt, "3", kBench, kBenchG, "Prefill repeats (median)"), 1, 100));
  t.push_back(Row("skip-prefill", T::kBool, "false", kBench, kBenchG, "Do not measure prefill"));
  t.push_back(Row("by-weight", T::kBool, "false", kBench, kBenchG,
                  "Print each decode batch's matmuls per weight (time, GB/s, share of the "
                  "bandwidth)"));
  // synth, quantize, align
  t.push_back(Row("arch", T::kString, "glm_moe_dsa", kSynth, kSynthG,
                  "Architecture: glm_moe_dsa | deepseek_v32 | deepseek_v3"));
  t.push_back(Row("preset", T::kString, "tiny", kSynth, kSynthG,
                  "Size: tiny (tests) | 1g | 4g (CPU benchmarks) | 16g (GPU benchmarks)"));
  t.push_back(Row("quant", T::kString, "", kSynth, kSynthG,
                  "Weight format: nvfp4 | fp8-block (default: bf16)"));
  t.push_back(
      Ranged(Row("seed", T::kInt, "1", kSynth, kSynthG, "Random seed"), 0, 9007199254740992.0));
  t.push_back(Row("out", T::kString, "", kSynth | kQuantize | kAlign, kOut,
                  "Output directory (required; must not exist, or be empty)"));
  t.push_back(OneOf(Row("scheme", T::kString, "", kQuantize, kQuantG,
                        "Quantization scheme (required): nvfp4 (ModelOpt) or fp8-block "
                        "(DeepSeek)"),
                    {"nvfp4", "fp8-block"}));
  OptionSpec exclude = Row("exclude", T::kString, "", kQuantize, kQuantG,
                           "Module pattern kept in the input precision (* and ? wildcards); "
                           "repeatable, or comma-separated");
  exclude.repeatable = true;
  t.push_back(exclude);
  t.push_back(OneOf(Row("fp8-scale-fmt", T::kString, "ue8m0", kQuantize, kQuantG,
                        "fp8-block scales: ue8m0 (powers of two, DeepSeek-V3.2) or float"),
                    {"ue8m0", "float"}));
  t.push_back(
      Ranged(Row("max-shard-gb", T::kFloat, "4", kQuantize, kQuantG, "Shard size limit in GiB"),
             0.001, 1e6));
  // output format, backends
  t.push_back(Row("json", T::kBool, "false", kExplain | kBench | kBackends, kOut,
                  "Print the result as JSON on stdout"));
  t.push_back(Row("self-test", T::kBool, "false", kBackends, kSelf,
                  "Run each usable kernel on random inputs and compare with the reference"));
}

}  // namespace lucid::config

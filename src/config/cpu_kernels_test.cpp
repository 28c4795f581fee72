// --cpu-kernels: parsing through the option table, provenance from every source, the kernel-set
// report of the resolved configuration, and the ops each set builds.
#include "config/cpu_kernels.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/cpu_fast_ops.h"
#include "backends/cpu/ops_registry.h"
#include "config/kernel_catalog.h"
#include "config/option_table.h"
#include "config/resolver.h"
#include "config/settings.h"

namespace lucid::config {
namespace {

std::string TinyModel() {
  return std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/models/tiny_glm_moe_dsa";
}
std::string Glm5() { return std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/configs/GLM-5-NVFP4"; }

// Resolves the tiny model with `cli` flags, `env` variables and, when `file_text` is not empty, a
// config file holding it.
StatusOr<ResolvedConfig> ResolveWith(const std::map<std::string, std::string>& cli,
                                     const std::map<std::string, std::string>& env = {},
                                     const std::string& file_text = "",
                                     const std::string& model = TinyModel()) {
  ExplicitSettings s;
  LUCID_RETURN_IF_ERROR(s.Set("model-path", model, Source::kCli, "--model-path"));
  for (const auto& [k, v] : cli) LUCID_RETURN_IF_ERROR(s.Set(k, v, Source::kCli, "--" + k));
  if (!file_text.empty()) {
    const std::string path =
        ::testing::TempDir() + "/lucid_cpu_kernels_" + std::to_string(getpid()) + ".yaml";
    std::ofstream(path) << file_text;
    LUCID_RETURN_IF_ERROR(LoadConfigFile(path, &s));
    std::remove(path.c_str());
  }
  LUCID_RETURN_IF_ERROR(LoadEnvironment(
      [&env](const char* name) -> const char* {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      &s));
  return Resolve(s);
}

TEST(CpuKernelsOptionTest, IsAnEnumDefaultingToAuto) {
  const OptionSpec* o = FindOption("--cpu-kernels");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->type, OptionType::kEnum);
  EXPECT_EQ(o->default_text, "auto");
  EXPECT_EQ(o->allowed, (std::vector<std::string>{"fast", "fast-bf16act", "reference"}));
  EXPECT_EQ(o->env_name(), "LUCID_CPU_KERNELS");
  EXPECT_EQ(o->group, "Kernels");
  EXPECT_FALSE(o->server_only);
  EXPECT_TRUE(DefaultValue(*o).is_null());  // auto: a rule decides
  EXPECT_EQ(FindOption("cpu_kernels"), o);  // config-file spelling
}

TEST(CpuKernelsOptionTest, BadValuesGetTheTablesOneLineError) {
  const OptionSpec& o = *FindOption("cpu-kernels");
  EXPECT_EQ(*ParseOptionValue(o, "reference"), "reference");
  for (const char* bad : {"Auto", "Fast", "ref", ""}) {
    auto v = ParseOptionValue(o, bad);
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_EQ(v.status().message(), "--cpu-kernels: unknown value \"" + std::string(bad) +
                                        "\" (valid: auto, fast, fast-bf16act, reference)");
  }
  EXPECT_EQ(ParseCpuKernelSet("bogus").status().message(),
            "--cpu-kernels: unknown value \"bogus\" (valid: auto, fast, fast-bf16act, reference)");
  // "auto" names no set: the resolver's rule or ChooseCpuKernelSet decides it first.
  EXPECT_EQ(ParseCpuKernelSet("auto").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseCpuKernelSet("fast"), CpuKernelSet::kFast);
  EXPECT_EQ(*ParseCpuKernelSet("reference"), CpuKernelSet::kReference);
  EXPECT_EQ(*ParseCpuKernelSet("fast-bf16act"), CpuKernelSet::kFastBf16Activations);
  for (CpuKernelSet set :
       {CpuKernelSet::kFast, CpuKernelSet::kFastBf16Activations, CpuKernelSet::kReference})
    EXPECT_EQ(*ParseCpuKernelSet(CpuKernelSetName(set)), set);
  auto env = ResolveWith({}, {{"LUCID_CPU_KERNELS", "slow"}});
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.status().message(),
            "LUCID_CPU_KERNELS: unknown value \"slow\" (valid: auto, fast, fast-bf16act, "
            "reference)");
}

// auto: bf16 matmul inputs for a bfloat16 checkpoint (its own precision), the split otherwise.
TEST(CpuKernelsOptionTest, AutoChoosesByTheCheckpointsDtype) {
  EXPECT_EQ(CpuKernelSetForCheckpoint("bfloat16"), CpuKernelSet::kFastBf16Activations);
  for (const char* dtype : {"float32", "float16", ""})
    EXPECT_EQ(CpuKernelSetForCheckpoint(dtype), CpuKernelSet::kFast) << dtype;
  EXPECT_NE(CpuKernelSetForCheckpointReason("bfloat16").find("torch_dtype is bfloat16"),
            std::string::npos);
  EXPECT_NE(CpuKernelSetForCheckpointReason("").find("torch_dtype is unset"), std::string::npos);
  EXPECT_EQ(*ChooseCpuKernelSet("auto", "bfloat16"), CpuKernelSet::kFastBf16Activations);
  EXPECT_EQ(*ChooseCpuKernelSet("auto", "float32"), CpuKernelSet::kFast);
  EXPECT_EQ(*ChooseCpuKernelSet("fast", "bfloat16"), CpuKernelSet::kFast);  // given: kept
  EXPECT_EQ(*ChooseCpuKernelSet("reference", "bfloat16"), CpuKernelSet::kReference);
  EXPECT_EQ(ChooseCpuKernelSet("slow", "bfloat16").status().code(), StatusCode::kInvalidArgument);
  // The resolver's rule, with its reason: the tiny GLM-5 fixture says bfloat16, the tiny
  // DeepSeek-V3.2 one float32.
  auto glm = ResolveWith({});
  ASSERT_TRUE(glm.ok()) << glm.status().ToString();
  EXPECT_EQ(glm->Value("cpu-kernels"), "fast-bf16act");
  EXPECT_EQ(glm->Field("cpu-kernels")->Provenance(), "rule:cpu-kernels-from-dtype");
  EXPECT_NE(glm->Field("cpu-kernels")->reason.find("bfloat16"), std::string::npos);
  auto v32 = ResolveWith(
      {}, {}, "", std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/models/tiny_deepseek_v32");
  ASSERT_TRUE(v32.ok()) << v32.status().ToString();
  EXPECT_EQ(v32->Value("cpu-kernels"), "fast");
  EXPECT_NE(v32->Field("cpu-kernels")->reason.find("float32"), std::string::npos);
  auto given = ResolveWith({{"cpu-kernels", "auto"}});  // said explicitly: the same rule
  ASSERT_TRUE(given.ok()) << given.status().ToString();
  EXPECT_EQ(given->Value("cpu-kernels"), "fast-bf16act");
}

TEST(CpuKernelsOptionTest, ProvenanceFromEverySource) {
  auto def = ResolveWith({});
  ASSERT_TRUE(def.ok()) << def.status().ToString();
  EXPECT_EQ(def->Value("cpu-kernels"), "fast-bf16act");
  EXPECT_EQ(def->Field("cpu-kernels")->Provenance(), "rule:cpu-kernels-from-dtype");

  auto env = ResolveWith({}, {{"LUCID_CPU_KERNELS", "reference"}});
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env->Value("cpu-kernels"), "reference");
  EXPECT_EQ(env->Field("cpu-kernels")->Provenance(), "user:env");
  EXPECT_EQ(env->Field("cpu-kernels")->origin, "LUCID_CPU_KERNELS");

  auto file = ResolveWith({}, {{"LUCID_CPU_KERNELS", "fast"}}, "cpu_kernels: reference\n");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->Value("cpu-kernels"), "reference");
  EXPECT_EQ(file->Field("cpu-kernels")->Provenance(), "user:file");

  auto cli = ResolveWith({{"cpu-kernels", "fast"}}, {{"LUCID_CPU_KERNELS", "reference"}},
                         "cpu-kernels: reference\n");
  ASSERT_TRUE(cli.ok()) << cli.status().ToString();
  EXPECT_EQ(cli->Value("cpu-kernels"), "fast");
  EXPECT_EQ(cli->Field("cpu-kernels")->Provenance(), "user:cli");
  const nlohmann::json j = cli->ToJson();
  EXPECT_EQ(j["settings"]["cpu-kernels"]["value"], "fast");
  EXPECT_EQ(j["settings"]["cpu-kernels"]["source"], "user:cli");
}

TEST(CpuKernelsReportTest, SaysWhichKernelsRunHereAndWhy) {
  auto def = ResolveWith({{"cpu-kernels", "fast"}});
  ASSERT_TRUE(def.ok()) << def.status().ToString();
  ASSERT_TRUE(def->data().cpu_kernels.has_value());
  const CpuFastOps fast;
  EXPECT_EQ(def->data().cpu_kernels->ops, fast.name());  // what serve will construct here
  EXPECT_EQ(MakeCpuOps(CpuKernelSet::kFast)->name(), std::string(fast.name()));
  nlohmann::json j = def->ToJson()["cpu_kernels"];
  EXPECT_EQ(j["set"], "fast");
  EXPECT_EQ(j["ops"], fast.name());
  EXPECT_EQ(j["source"], "user:cli");
  EXPECT_NE(j["reason"].get<std::string>().find(CpuIsaName(fast.isa())), std::string::npos)
      << j.dump();
  // The plan pads the ops name to a column; its width depends on the instruction set's name.
  const std::string text = def->ToText();
  EXPECT_TRUE(std::regex_search(
      text, std::regex(std::string(fast.name()) + " +--cpu-kernels fast \\(user:cli\\)")))
      << text;
  // By default the bf16 fixture gets the bf16-input set, and the plan says which rule chose it.
  auto rule = ResolveWith({});
  ASSERT_TRUE(rule.ok()) << rule.status().ToString();
  EXPECT_EQ(rule->ToJson()["cpu_kernels"]["set"], "fast-bf16act");
  EXPECT_EQ(rule->ToJson()["cpu_kernels"]["source"], "rule:cpu-kernels-from-dtype");
  EXPECT_TRUE(std::regex_search(
      rule->ToText(),
      std::regex("-bf16act +--cpu-kernels fast-bf16act \\(rule:cpu-kernels-from-dtype\\)")))
      << rule->ToText();

  auto ref = ResolveWith({{"cpu-kernels", "reference"}});
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  j = ref->ToJson()["cpu_kernels"];
  EXPECT_EQ(j["set"], "reference");
  EXPECT_EQ(j["ops"], "cpu-reference");
  EXPECT_EQ(j["source"], "user:cli");
  EXPECT_EQ(MakeCpuOps(CpuKernelSet::kReference)->name(), std::string("cpu-reference"));
  EXPECT_NE(ref->ToText().find("cpu-reference     --cpu-kernels reference (user:cli)"),
            std::string::npos)
      << ref->ToText();

  // fast-bf16act: the fast ops with bf16 activations, named so in the plan and by the ops.
  auto bf16 = ResolveWith({{"cpu-kernels", "fast-bf16act"}});
  ASSERT_TRUE(bf16.ok()) << bf16.status().ToString();
  j = bf16->ToJson()["cpu_kernels"];
  const CpuFastOps fast_bf16(CpuIsa::kAvx512Bf16, FastActivations::kBf16);
  EXPECT_EQ(j["set"], "fast-bf16act");
  EXPECT_EQ(j["ops"], fast_bf16.name());
  EXPECT_EQ(j["ops"], std::string(fast.name()) + "-bf16act");
  EXPECT_NE(j["reason"].get<std::string>().find("rounded to bf16"), std::string::npos) << j.dump();
  const std::unique_ptr<Ops> made = MakeCpuOps(CpuKernelSet::kFastBf16Activations);
  EXPECT_EQ(made->name(), std::string(fast_bf16.name()));
  const auto* made_fast = dynamic_cast<const CpuFastOps*>(made.get());
  ASSERT_NE(made_fast, nullptr);
  EXPECT_EQ(made_fast->activations(), FastActivations::kBf16);
}

TEST(CpuKernelsReportTest, DescribedTargetsAndGpusAreHonest) {
  // A described cpu machine: its instruction set is chosen when it starts, not here.
  auto cpu = ResolveWith({{"target", "cpu"}, {"cpu-memory", "8GiB"}, {"cpu-kernels", "fast"}});
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  ASSERT_TRUE(cpu->data().cpu_kernels.has_value());
  EXPECT_EQ(cpu->data().cpu_kernels->ops, "cpu-fast-<isa>");
  EXPECT_NE(cpu->data().cpu_kernels->reason.find("chosen at start-up"), std::string::npos);
  auto cpu_bf16 =
      ResolveWith({{"target", "cpu"}, {"cpu-memory", "8GiB"}, {"cpu-kernels", "fast-bf16act"}});
  ASSERT_TRUE(cpu_bf16.ok()) << cpu_bf16.status().ToString();
  EXPECT_EQ(cpu_bf16->data().cpu_kernels->ops, "cpu-fast-<isa>-bf16act");
  // On a GPU the CPU kernels do not run: no report, and an explicit choice is a note.
  const std::map<std::string, std::string> gpus = {
      {"target", "cuda:sm_120"}, {"gpu-memory", "96GiB"}, {"gpu-count", "8"}, {"tp-size", "8"}};
  auto gpu = ResolveWith(gpus, {}, "", Glm5());
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  EXPECT_FALSE(gpu->data().cpu_kernels.has_value());
  EXPECT_TRUE(gpu->ToJson()["cpu_kernels"].is_null());
  for (const std::string& n : gpu->data().notes)
    EXPECT_EQ(n.find("cpu-kernels"), std::string::npos) << n;
  std::map<std::string, std::string> gpus_ref = gpus;
  gpus_ref["cpu-kernels"] = "reference";
  auto gpu_ref = ResolveWith(gpus_ref, {}, "", Glm5());
  ASSERT_TRUE(gpu_ref.ok()) << gpu_ref.status().ToString();
  bool noted = false;
  for (const std::string& n : gpu_ref->data().notes)
    noted = noted || n == "--cpu-kernels reference (user:cli) has no effect: the device is cuda";
  EXPECT_TRUE(noted) << gpu_ref->ToText();
}

// The backend registry drives the choice: its CPU sets are exactly the flag's values, forcing each
// through --cpu-kernels makes the resolver report, and MakeCpuOps (serve, generate) build, the ops
// that entry builds (named by the ops themselves), and the catalog's compiled_in is true exactly
// for the (device, family, kernel) the registry serves.
TEST(BackendRegistryTest, ForcingEachRegisteredSetRunsIt) {
  std::vector<std::string> names;
  for (const OpsSetEntry& e : OpsRegistry())
    if (e.device == "cpu") names.push_back(e.name);
  std::vector<std::string> allowed = FindOption("cpu-kernels")->allowed;
  std::sort(names.begin(), names.end());
  std::sort(allowed.begin(), allowed.end());
  EXPECT_EQ(names, allowed);
  std::set<std::string> ops_names;
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const std::string built = FindOpsSet("cpu", name)->make(CpuIsa::kAvx512Bf16)->name();
    ops_names.insert(built);
    auto r = ResolveWith({{"cpu-kernels", name}});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const nlohmann::json j = r->ToJson()["cpu_kernels"];
    EXPECT_EQ(j["set"], name);
    EXPECT_EQ(j["ops"], built);
    auto set = ParseCpuKernelSet(name);
    ASSERT_TRUE(set.ok());
    EXPECT_EQ(MakeCpuOps(*set)->name(), built);
    auto chosen = ChooseCpuKernelSet(name, "bfloat16");  // generate and bench
    ASSERT_TRUE(chosen.ok());
    EXPECT_EQ(MakeCpuOps(*chosen)->name(), built);
  }
  EXPECT_EQ(ops_names.size(), names.size());  // every set is a different implementation
  EXPECT_FALSE(FindOpsSet("cpu", "bogus"));
  EXPECT_FALSE(FindOpsSet("cuda", "fast"));
}

// The CPU rows are compiled in exactly when registered; lucid's CUDA kernels (cuda-bf16act,
// cuda-reference and cuda-fp8act) are compiled in exactly in a -DLUCID_CUDA=ON build and are not in
// the backend registry (the CUDA op sets are backends/cuda/cuda_ops.h's).
TEST(BackendRegistryTest, ExplainMarksExactlyTheRegisteredKernelsCompiledIn) {
  int cpu_rows = 0, cuda_rows = 0, compiled = 0;
  for (const KernelDecl& d : KernelCatalog()) {
    const bool reg = Registered(DeviceName(d.device), FamilyName(d.family), d.name);
    if (d.device == Device::kCpu) {
      EXPECT_EQ(d.compiled_in, reg) << d.name << " " << FamilyName(d.family);
    } else {
      EXPECT_EQ(d.device, Device::kCuda);
      EXPECT_TRUE(d.name == "cuda-reference" || d.name == "cuda-bf16act" ||
                  (d.name == "cuda-fp8act" &&
                   (d.family == KernelFamily::kMatmul || d.family == KernelFamily::kMoe)))
          << d.name;
      EXPECT_FALSE(reg) << FamilyName(d.family);
      EXPECT_EQ(d.compiled_in, BuildHasCuda()) << FamilyName(d.family);
    }
    cpu_rows += d.device == Device::kCpu;
    cuda_rows += d.device == Device::kCuda;
    compiled += d.compiled_in;
  }
  EXPECT_EQ(compiled, cpu_rows + (BuildHasCuda() ? cuda_rows : 0));
  EXPECT_GT(cpu_rows, 0);
  // a cuda-bf16act and a cuda-reference row per family, a cuda-fp8act row for matmul and moe
  EXPECT_EQ(cuda_rows, 2 * cpu_rows + 2);
  for (const KernelDecl& d : ForeignKernels()) EXPECT_FALSE(d.compiled_in) << d.name;
  // explain --json: every chosen kernel and every candidate, on the CPU and on a described GPU.
  const std::map<std::string, std::string> gpus = {
      {"target", "cuda:sm_120"}, {"gpu-memory", "96GiB"}, {"gpu-count", "8"}, {"tp-size", "8"}};
  for (const auto& [flags, model] :
       {std::pair{std::map<std::string, std::string>{}, TinyModel()}, std::pair{gpus, Glm5()}}) {
    auto r = ResolveWith(flags, {}, "", model);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const nlohmann::json j = r->ToJson();
    const std::string device = flags.empty() ? "cpu" : "cuda";
    auto compiled_in = [&](const std::string& fam, const std::string& name) {
      return device == "cpu"
                 ? Registered(device, fam, name)
                 : (name == "cuda-reference" || name == "cuda-bf16act" || name == "cuda-fp8act") &&
                       BuildHasCuda();
    };
    ASSERT_FALSE(j["kernels"].empty());
    for (const auto& k : j["kernels"]) {
      const std::string fam = k["family"];
      // The described GPU deployment computes in the checkpoint's bfloat16: cuda-bf16act.
      EXPECT_EQ(k["kernel"], device == "cpu" ? "cpu" : "cuda-bf16act") << k.dump();
      EXPECT_EQ(k["compiled_in"].get<bool>(), compiled_in(fam, k["kernel"].get<std::string>()))
          << k.dump();
      for (const auto& c : k["candidates"])
        EXPECT_EQ(c["compiled_in"].get<bool>(), compiled_in(fam, c["name"].get<std::string>()))
            << c.dump();
    }
  }
}

}  // namespace
}  // namespace lucid::config

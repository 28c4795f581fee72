// Every flag of every subcommand comes from the option table (config/option_table.h): the
// commands are built as main.cpp builds them, and each of their options is looked up in the table.
#include "cli/commands.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "config/option_table.h"
#include "config/settings.h"

#ifdef LUCID_HAVE_CUDA
#include "backends/cuda/cuda_device.h"
#endif

namespace lucid::cli {
namespace {

// The Command bit of a subcommand's name; 0 when the table has no such command.
config::CommandSet CommandOf(const std::string& name) {
  for (uint32_t bit = 1; bit != 0 && bit <= config::kBackends; bit <<= 1)
    if (name == config::CommandName(static_cast<config::Command>(bit))) return bit;
  return 0;
}

TEST(CommandsTest, EveryFlagOfEverySubcommandIsATableOptionOfThatCommand) {
  CLI::App app{"lucid"};
  int exit_code = 0;
  for (const auto& reg : kCommands) reg(app, &exit_code);
  std::set<std::string> seen_commands;
  for (const CLI::App* cmd : app.get_subcommands([](const CLI::App*) { return true; })) {
    const std::string name = cmd->get_name();
    const config::CommandSet bit = CommandOf(name);
    ASSERT_NE(bit, 0u) << "subcommand " << name << " is not a Command of the option table";
    seen_commands.insert(name);
    int flags = 0;
    for (const CLI::Option* opt : cmd->get_options()) {
      const std::string flag = opt->get_name(/*positional=*/false, /*all_options=*/false);
      if (flag == "--help" || flag == "--config") continue;  // CLI11's help; the config file
      const config::OptionSpec* spec = config::FindOption(flag);
      ASSERT_NE(spec, nullptr) << name << " " << flag << " is not in the option table";
      EXPECT_TRUE(spec->applies_to(static_cast<config::Command>(bit)))
          << name << " " << flag << ": the table does not list " << name << " for it";
      ++flags;
    }
    // And the other way round: every table option of the command is a flag of it.
    int expected = 0;
    for (const config::OptionSpec& o : config::Options()) {
      if (!o.applies_to(static_cast<config::Command>(bit))) continue;
      ++expected;
      bool found = false;
      for (const CLI::Option* opt : cmd->get_options()) found = found || opt->check_lname(o.name);
      EXPECT_TRUE(found) << name << " lacks --" << o.name;
    }
    EXPECT_EQ(flags, expected) << name;
  }
  EXPECT_EQ(seen_commands.size(), std::size(kCommands));
}

TEST(CommandsTest, ToolArgumentsDoNotReachTheServer) {
  // A tool's own option is refused by the commands that do not take it, from any source.
  config::ExplicitSettings serve(config::kServe);
  Status s = serve.Set("prompt", "hi", config::Source::kFile, "cfg.json: prompt");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("unknown option \"prompt\" of `lucid serve`"), std::string::npos)
      << s.message();
  config::ExplicitSettings gen(config::kGenerate);
  EXPECT_TRUE(gen.Set("prompt", "hi", config::Source::kCli, "--prompt").ok());
  EXPECT_FALSE(gen.Set("port", "8080", config::Source::kCli, "--port").ok());
  EXPECT_EQ(gen.String("prompt"), "hi");
  EXPECT_EQ(gen.Int("max-new-tokens"), 16);  // the table's default
}

// Data-parallel attention runs over the ranks of an MPI launch: without one, serve and generate
// refuse it before loading anything, exit 2, one line naming the launch that would work.
TEST(CommandsTest, DataParallelAttentionWithoutMpirunIsRefused) {
  const std::string model =
      std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/models/tiny_glm_moe_dsa";
  for (const char* command : {"serve", "generate"}) {
    CLI::App app{"lucid"};
    app.require_subcommand(1);
    int exit_code = 0;
    for (const auto& reg : kCommands) reg(app, &exit_code);
    std::vector<std::string> args = {command,
                                     "--model-path",
                                     model,
                                     "--prompt-ids",
                                     "1",
                                     "--tp-size",
                                     "2",
                                     "--enable-dp-attention",
                                     "--dp-size",
                                     "2",
                                     "--cpu-wait-policy",
                                     "environment"};
    if (std::string(command) == "serve") args.erase(args.begin() + 3, args.begin() + 5);
    std::vector<std::string> rev(args.rbegin(), args.rend());
    testing::internal::CaptureStderr();
    app.parse(rev);
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(exit_code, 2) << command << ": " << err;
    EXPECT_EQ(err.rfind(std::string("lucid ") + command + ": ", 0), 0u) << err;
    EXPECT_NE(err.find("mpirun -np 2"), std::string::npos) << command << ": " << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  }
}

// Runs `lucid <args>` in process; returns the exit code and what it printed on stderr.
std::pair<int, std::string> RunLucid(const std::vector<std::string>& args) {
  CLI::App app{"lucid"};
  app.require_subcommand(1);
  int exit_code = 0;
  for (const auto& reg : kCommands) reg(app, &exit_code);
  std::vector<std::string> rev(args.rbegin(), args.rend());
  testing::internal::CaptureStderr();
  testing::internal::CaptureStdout();
  app.parse(rev);
  (void)testing::internal::GetCapturedStdout();
  return {exit_code, testing::internal::GetCapturedStderr()};
}

// generate --device cuda runs lucid's CUDA kernels (cuda-bf16act in bfloat16, cuda-reference in
// float32) without CUDA graphs: a plan asking for graphs or another dtype is refused naming the
// flags that make it runnable; with them, a machine without a GPU gets the device probe's reason.
// Exit 2, one line, either way.
TEST(CommandsTest, GenerateOnCudaRunsOnlyAPlanCudaReferenceCanRun) {
  const std::string model =
      std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/models/tiny_glm_moe_dsa";
  const std::vector<std::string> base = {
      "generate", "--model-path",      model,        "--prompt-ids",
      "1,2",      "--max-new-tokens",  "2",          "--device",
      "cuda",     "--target",          "cuda:sm_90", "--gpu-memory",
      "80GiB",    "--cpu-wait-policy", "environment"};
  auto [code, err] = RunLucid(base);
  EXPECT_EQ(code, 2) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
#ifdef LUCID_HAVE_CUDA
  EXPECT_NE(err.find("cuda-bf16act cannot be captured in a CUDA graph"), std::string::npos) << err;
  EXPECT_NE(err.find("(pass --dtype bfloat16 or float32, and --disable-cuda-graph)"),
            std::string::npos)
      << err;
  std::vector<std::string> f16 = base;
  f16.insert(f16.end(), {"--dtype", "float16", "--disable-cuda-graph"});
  auto [code_f16, err_f16] = RunLucid(f16);
  EXPECT_EQ(code_f16, 2) << err_f16;
  EXPECT_NE(err_f16.find("cuda-bf16act does not compute in f16 (only bf16)"), std::string::npos)
      << err_f16;
  StatusOr<std::vector<cuda::CudaDeviceInfo>> devices = cuda::ProbeCudaDevices();
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--disable-cuda-graph"},
        std::vector<std::string>{"--dtype", "float32", "--disable-cuda-graph"}}) {
    std::vector<std::string> runnable = base;
    runnable.insert(runnable.end(), flags.begin(), flags.end());
    auto [code2, err2] = RunLucid(runnable);
    if (devices.ok()) {
      EXPECT_EQ(code2, 0) << err2;  // a GPU machine runs it (scripts/cuda_check.sh compares it)
    } else {
      EXPECT_EQ(code2, 2) << err2;
      EXPECT_EQ(err2, "lucid generate: " + devices.status().message() + "\n");
    }
  }
#else
  EXPECT_NE(err.find("this build has no CUDA backend"), std::string::npos) << err;
#endif
}

// serve --device cuda is refused the same way while the plan needs what lucid's CUDA kernels lack
// (the resolver's not-runnable lines); a runnable plan on a machine without a GPU stops before it
// listens, with the device probe's reason. (On a GPU machine it would serve:
// tests/e2e/test_serve_cuda.py runs it there.)
TEST(CommandsTest, ServeOnCudaRunsOnlyAPlanCudaReferenceCanRun) {
  const std::string model =
      std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/models/tiny_glm_moe_dsa";
  const std::vector<std::string> base = {
      "serve",       "--model-path", model,          "--device", "cuda",
      "--target",    "cuda:sm_90",   "--gpu-memory", "80GiB",    "--cpu-wait-policy",
      "environment", "--log-level",  "error"};
  auto [code, err] = RunLucid(base);
  EXPECT_EQ(code, 2) << err;
#ifdef LUCID_HAVE_CUDA
  EXPECT_NE(err.find("this build cannot run the resolved plan:"), std::string::npos) << err;
  EXPECT_NE(err.find("kernel cuda-bf16act cannot be captured in a CUDA graph"), std::string::npos)
      << err;
  StatusOr<std::vector<cuda::CudaDeviceInfo>> devices = cuda::ProbeCudaDevices();
  if (devices.ok()) return;  // it would serve until stopped
  std::vector<std::string> runnable = base;
  runnable.insert(runnable.end(), {"--dtype", "float32", "--disable-cuda-graph"});
  auto [code2, err2] = RunLucid(runnable);
  EXPECT_EQ(code2, 2) << err2;
  EXPECT_NE(err2.find("lucid serve: " + devices.status().message()), std::string::npos) << err2;
  EXPECT_EQ(std::count(err2.begin(), err2.end(), '\n'), 1) << err2;
#else
  EXPECT_NE(err.find("this build has no CUDA backend"), std::string::npos) << err;
#endif
}

}  // namespace
}  // namespace lucid::cli

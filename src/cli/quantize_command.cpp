// `lucid quantize --model-path IN --out OUT --scheme nvfp4|fp8-block [--exclude PATTERN]...`:
// writes a complete quantized checkpoint in the public formats (formats/quantize_checkpoint.h).
// Progress goes to stderr when it is a terminal.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "formats/quantize_checkpoint.h"

namespace lucid::cli {
namespace {

struct QuantizeFlags {
  std::string model_path, out, scheme;
  std::vector<std::string> exclude;
  std::string fp8_scale_fmt = "ue8m0";
  double max_shard_gb = 4.0;
};

Status RunQuantize(const QuantizeFlags& f) {
  QuantizeOptions o;
  o.scheme = f.scheme == "nvfp4" ? QuantScheme::kNvfp4 : QuantScheme::kFp8Block;
  o.exclude = f.exclude;
  o.fp8_float_scales = f.fp8_scale_fmt == "float";
  o.max_shard_bytes = static_cast<uint64_t>(f.max_shard_gb * (1ull << 30));
  const bool tty = isatty(fileno(stderr)) != 0;
  const auto t0 = std::chrono::steady_clock::now();
  o.progress = [tty](size_t done, size_t total, const std::string& name) {
    if (!tty) return;
    std::fprintf(stderr, "\r\033[K[%3zu%%] %zu/%zu %s", done * 100 / total, done, total,
                 name.c_str());
    if (done == total) std::fprintf(stderr, "\n");
  };
  LUCID_RETURN_IF_ERROR(QuantizeCheckpoint(f.model_path, f.out, o));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "lucid quantize: wrote %s (%s) in %.1f s\n", f.out.c_str(), f.scheme.c_str(),
               s);
  return OkStatus();
}

}  // namespace

void RegisterQuantizeCommand(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<QuantizeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "quantize", "Write an NVFP4 (ModelOpt) or FP8-block (DeepSeek) copy of a checkpoint");
  cmd->add_option("--model-path", flags->model_path, "Unquantized model directory")->required();
  cmd->add_option("--out", flags->out, "Output directory (must not exist, or be empty)")
      ->required();
  cmd->add_option("--scheme", flags->scheme, "nvfp4 | fp8-block")
      ->required()
      ->check(CLI::IsMember({"nvfp4", "fp8-block"}));
  cmd->add_option("--exclude", flags->exclude,
                  "Module pattern kept in the input precision (repeatable; * and ? wildcards)");
  cmd->add_option("--fp8-scale-fmt", flags->fp8_scale_fmt,
                  "fp8-block scales: ue8m0 (powers of two, DeepSeek-V3.2) or float")
      ->check(CLI::IsMember({"ue8m0", "float"}));
  cmd->add_option("--max-shard-gb", flags->max_shard_gb, "Shard size limit in GiB")
      ->check(CLI::PositiveNumber);
  cmd->callback([flags, exit_code] {
    Status s = RunQuantize(*flags);
    if (!s.ok()) {
      std::fprintf(stderr, "lucid quantize: %s\n", s.ToString().c_str());
      *exit_code = s.code() == StatusCode::kInvalidArgument ? 2 : 1;
    }
  });
}

}  // namespace lucid::cli

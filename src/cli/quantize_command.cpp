// `lucid quantize --model-path IN --out OUT --scheme nvfp4|fp8-block [--exclude PATTERN]...`:
// writes a complete quantized checkpoint in the public formats (formats/quantize_checkpoint.h).
// Progress goes to stderr when it is a terminal.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "config/cli_options.h"
#include "formats/quantize_checkpoint.h"

namespace lucid::cli {
namespace {

struct QuantizeFlags {
  std::string model_path, out, scheme;
  std::vector<std::string> exclude;
  std::string fp8_scale_fmt;
  double max_shard_gb = 0;
};

StatusOr<QuantizeFlags> FlagsFrom(const config::ExplicitSettings& s) {
  QuantizeFlags f;
  f.model_path = s.String("model-path");
  f.out = s.String("out");
  f.scheme = s.String("scheme");
  if (f.model_path.empty()) return InvalidArgument("--model-path is required");
  if (f.out.empty()) return InvalidArgument("--out is required");
  if (f.scheme.empty()) return InvalidArgument("--scheme is required (nvfp4 or fp8-block)");
  std::stringstream patterns(s.String("exclude"));
  for (std::string p; std::getline(patterns, p, ',');)
    if (!p.empty()) f.exclude.push_back(p);
  f.fp8_scale_fmt = s.String("fp8-scale-fmt");
  f.max_shard_gb = s.Number("max-shard-gb");
  return f;
}

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
  auto opts = std::make_shared<config::CliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "quantize", "Write an NVFP4 (ModelOpt) or FP8-block (DeepSeek) copy of a checkpoint");
  opts->AddTo(cmd, config::kQuantize);
  cmd->callback([opts, exit_code] {
    StatusOr<config::ExplicitSettings> settings = opts->Collect();
    StatusOr<QuantizeFlags> flags =
        settings.ok() ? FlagsFrom(*settings) : StatusOr<QuantizeFlags>(settings.status());
    Status s = flags.ok() ? RunQuantize(*flags) : flags.status();
    if (!s.ok()) {
      std::fprintf(stderr, "lucid quantize: %s\n", s.message().c_str());
      *exit_code = ExitCodeFor(s);
    }
  });
}

}  // namespace lucid::cli

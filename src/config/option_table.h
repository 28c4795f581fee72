// The option table: every flag of every subcommand, once. Flags, config-file keys, environment
// variables, help text and value validation all come from this table (docs/CONFIG.md lists it).
// Each option names the subcommands that take it (`commands`). The plan options (those of `serve`
// and `explain`) are the settings the resolver resolves, with provenance, into a ResolvedConfig;
// some of them (model-path, kv-cache-dtype, cpu-kernels, page-size) are taken by `generate` and
// `bench` too, which resolve them the same way. The others are a tool's own arguments (generate's
// --prompt, bench's --batch, synth's --preset), read from the explicit settings with the table's
// default.
//
// Naming: an option `tp-size` is the flag `--tp-size`, the config-file key `tp-size` or `tp_size`,
// and the environment variable `LUCID_TP_SIZE`. Aliases (e.g. `dsa-prefill-backend`) are accepted
// wherever the name is.
// Values are nlohmann::json scalars after parsing: bool, integer, number or string. JSON null means
// "auto": the resolver decides (by a rule) and says why. Options whose default is "auto" accept the
// literal text "auto".
// Thread-safety: the table is immutable after first use; all functions are safe to call
// concurrently.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "config/kernel_catalog.h"
#include "core/status.h"

namespace lucid::config {

enum class OptionType {
  kString,
  kInt,
  kFloat,
  kBool,
  kEnum,   // one of `allowed`
  kBytes,  // a size: "96GiB", "80GB", "1073741824"; parsed to an integer byte count
};
const char* OptionTypeName(OptionType t);

// The subcommands, as a bit set: the ones an option applies to.
enum Command : uint32_t {
  kServe = 1u << 0,
  kExplain = 1u << 1,
  kGenerate = 1u << 2,
  kBench = 1u << 3,
  kSynth = 1u << 4,
  kQuantize = 1u << 5,
  kAlign = 1u << 6,
  kBackends = 1u << 7,
};
using CommandSet = uint32_t;
inline constexpr CommandSet kPlanCommands = kServe | kExplain;
// "serve", "explain", ... (the subcommand's name on the command line).
const char* CommandName(Command c);

struct OptionSpec {
  std::string name;  // canonical spelling, without dashes in front: "tp-size"
  OptionType type = OptionType::kString;
  std::string default_text;  // "auto" when the resolver decides; "" for an empty string default
  std::vector<std::string> allowed;  // kEnum: valid values (without "auto")
  // Backend options: the kernel families the value names a kernel of. A foreign kernel's name
  // (kernel_catalog.h ForeignKernels) is refused with ForeignKernelRefusal's line.
  std::vector<KernelFamily> kernel_families;
  double min = 0, max = 0;  // kInt/kFloat/kBytes: inclusive range when min < max
  std::string help;
  std::string group;
  std::vector<std::string> aliases;     // other accepted names ("dsa-prefill-backend")
  bool secret = false;                  // never printed (api-key)
  bool server_only = false;             // has no effect on a plan (host, port, ...)
  CommandSet commands = kPlanCommands;  // the subcommands that take it
  bool repeatable = false;  // the flag may be given several times: the values joined by ","

  // A plan option: resolved (with provenance) into every ResolvedConfig.
  bool in_plan() const { return (commands & kPlanCommands) != 0; }
  bool applies_to(Command c) const { return (commands & c) != 0; }

  bool auto_default() const { return default_text == "auto"; }
  std::string flag() const { return "--" + name; }
  std::string env_name() const;  // "LUCID_TP_SIZE"
  std::string key() const;       // "tp_size" (JSON output key)
};

// The whole table, in display order: the plan options, then the tools' own. Backend options list
// the backends of the kernel catalog (config/kernel_catalog.h) as their allowed values: the catalog
// is their single source.
const std::vector<OptionSpec>& Options();

// The spec named `name` (canonical, alias, with dashes or underscores, with or without a leading
// "--"); nullptr when unknown.
const OptionSpec* FindOption(std::string_view name);

// Appends the tools' own options (generate, bench, synth, quantize, align, backends, explain's
// --json) to `table`; command_options.cpp. Used by Options() only.
void AppendCommandOptions(std::vector<OptionSpec>& table);

// Parses `text` for `spec`. "auto" gives JSON null when the option's default is auto. Errors are
// InvalidArgument with one line naming the flag, the value and what is valid (the list of values
// for enums, the range for numbers).
StatusOr<nlohmann::json> ParseOptionValue(const OptionSpec& spec, const std::string& text);

// The option's default as a JSON value (null for auto; "" for an enum without a default, which
// the command then requires).
nlohmann::json DefaultValue(const OptionSpec& spec);

// "96 GiB", "1.5 GiB", "512 MiB", "100 B": a human-readable binary size.
std::string FormatBytes(double bytes);
// Parses a size ("96GiB", "96 GB", "80G", "1e9"): decimal units KB/MB/GB/TB, binary units
// KiB/MiB/GiB/TiB and the single letters K/M/G/T (binary). InvalidArgument on anything else.
StatusOr<int64_t> ParseBytes(const std::string& text);

}  // namespace lucid::config

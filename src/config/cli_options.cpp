#include "config/cli_options.h"

#include <algorithm>

#include "config/option_table.h"

namespace lucid::config {

void CliOptions::AddTo(CLI::App* app, const std::vector<std::string>& skip) {
  for (const OptionSpec& o : Options()) {
    if (std::find(skip.begin(), skip.end(), o.name) != skip.end()) continue;
    std::string names = o.flag();
    for (const std::string& a : o.aliases) names += ",--" + a;
    std::string help = o.help;
    if (o.type == OptionType::kEnum) {
      help += " {";
      if (o.auto_default()) help += "auto,";
      for (size_t i = 0; i < o.allowed.size(); ++i) help += (i ? "," : "") + o.allowed[i];
      help += "}";
    }
    if (!o.secret) help += " [default: " + (o.default_text.empty() ? "\"\"" : o.default_text) + "]";
    help += " (env " + o.env_name() + ")";
    CLI::Option* opt = nullptr;
    if (o.type == OptionType::kBool) {
      // `--disable-cuda-graph` alone means true; `--disable-cuda-graph=false` is accepted too.
      opt = app->add_flag(names + "{true}", text_[o.name], help);
    } else {
      opt = app->add_option(names, text_[o.name], help);
    }
    opt->group(o.group);
    options_[o.name] = opt;
  }
  app->add_option("--config", config_path_,
                  "Config file with the same keys as the flags (JSON object or flat YAML)")
      ->group("Config file");
}

StatusOr<ExplicitSettings> CliOptions::Collect(const EnvLookup& getenv) const {
  ExplicitSettings s;
  for (const auto& [name, opt] : options_) {
    if (opt->count() == 0) continue;
    const std::string& text = text_.at(name);
    LUCID_RETURN_IF_ERROR(s.Set(name, text, Source::kCli, "--" + name));
  }
  if (!config_path_.empty()) LUCID_RETURN_IF_ERROR(LoadConfigFile(config_path_, &s));
  LUCID_RETURN_IF_ERROR(LoadEnvironment(getenv, &s));
  return s;
}

void UseOneLineErrors(CLI::App* app) {
  app->failure_message([](const CLI::App*, const CLI::Error& e) {
    return std::string("lucid: ") + e.what() + " (see --help)\n";
  });
}

}  // namespace lucid::config

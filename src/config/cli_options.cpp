#include "config/cli_options.h"

#include <algorithm>

#include "config/option_table.h"

namespace lucid::config {

void CliOptions::AddTo(CLI::App* app, Command command) {
  command_ = command;
  for (const OptionSpec& o : Options()) {
    if (!o.applies_to(command)) continue;
    std::string names = o.flag();
    for (const std::string& a : o.aliases) names += ",--" + a;
    std::string help = o.help;
    if (o.type == OptionType::kEnum) {
      help += " {";
      if (o.auto_default()) help += "auto,";
      for (size_t i = 0; i < o.allowed.size(); ++i) help += (i ? "," : "") + o.allowed[i];
      help += "}";
    }
    if (!o.secret && !o.default_text.empty()) help += " [default: " + o.default_text + "]";
    if (o.in_plan()) help += " (env " + o.env_name() + ")";
    CLI::Option* opt = nullptr;
    if (o.repeatable) {
      opt = app->add_option(names, many_[o.name], help);
    } else if (o.type == OptionType::kBool) {
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
  ExplicitSettings s(command_);
  for (const auto& [name, opt] : options_) {
    if (opt->count() == 0) continue;
    std::string text;
    if (auto many = many_.find(name); many != many_.end()) {
      for (const std::string& v : many->second) text += (text.empty() ? "" : ",") + v;
    } else {
      text = text_.at(name);
    }
    LUCID_RETURN_IF_ERROR(s.Set(name, text, Source::kCli, "--" + name));
  }
  if (!config_path_.empty()) LUCID_RETURN_IF_ERROR(LoadConfigFile(config_path_, &s));
  LUCID_RETURN_IF_ERROR(LoadEnvironment(getenv, &s));
  return s;
}

bool CliOptions::GivenTrue(const std::string& name) const {
  auto opt = options_.find(name);
  if (opt == options_.end() || opt->second->count() == 0) return false;
  const OptionSpec* spec = FindOption(name);
  StatusOr<nlohmann::json> v = ParseOptionValue(*spec, text_.at(name));
  return v.ok() && *v == true;
}

void UseOneLineErrors(CLI::App* app) {
  app->failure_message([](const CLI::App*, const CLI::Error& e) {
    return std::string("lucid: ") + e.what() + " (see --help)\n";
  });
}

}  // namespace lucid::config

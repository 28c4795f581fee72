#include "config/settings.h"

#include <fstream>
#include <sstream>

#include "config/option_table.h"
#include "config/wait_policy.h"

namespace lucid::config {
namespace {

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::string Unquote(const std::string& s) {
  if (s.size() >= 2 && (s.front() == '"' || s.front() == '\'') && s.back() == s.front())
    return s.substr(1, s.size() - 2);
  return s;
}

std::string JsonScalarText(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "auto";
  return v.dump();
}

Status LoadYaml(const std::string& path, const std::string& text, ExplicitSettings* s) {
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    // Strip comments outside quotes (values here never contain '#').
    size_t hash = line.find('#');
    if (hash != std::string::npos) line = line.substr(0, hash);
    if (Trim(line).empty() || Trim(line) == "---") continue;
    if (line[0] == ' ' || line[0] == '\t')
      return InvalidArgument(path + ":" + std::to_string(n) +
                             ": nested YAML is not supported (flat `key: value` lines only)");
    size_t colon = line.find(':');
    if (colon == std::string::npos)
      return InvalidArgument(path + ":" + std::to_string(n) + ": expected `key: value`");
    std::string key = Trim(line.substr(0, colon));
    std::string value = Unquote(Trim(line.substr(colon + 1)));
    if (value.empty())
      return InvalidArgument(path + ":" + std::to_string(n) + ": key \"" + key +
                             "\" has no value (nested YAML is not supported)");
    LUCID_RETURN_IF_ERROR(s->Set(key, value, Source::kFile, path + ": " + key));
  }
  return OkStatus();
}

}  // namespace

const char* SourceName(Source s) {
  switch (s) {
    case Source::kCli:
      return "user:cli";
    case Source::kFile:
      return "user:file";
    case Source::kEnv:
      return "user:env";
    case Source::kDefault:
      return "default";
    case Source::kRule:
      return "rule";
  }
  return "?";
}

Status ExplicitSettings::Set(const std::string& name, const std::string& text, Source source,
                             const std::string& origin) {
  const OptionSpec* spec = FindOption(name);
  const char* cmd = CommandName(command_);
  if (spec == nullptr || !spec->applies_to(command_))
    return InvalidArgument(origin + ": unknown option \"" + name + "\" of `lucid " + cmd +
                           "` (see `lucid " + cmd + " --help` for the list)");
  StatusOr<nlohmann::json> v = ParseOptionValue(*spec, text);
  if (!v.ok()) {
    // The parser names the flag; name the real origin when it is not the command line.
    std::string m = v.status().message();
    // ("--flag: why" -> "ORIGIN: why", "--flag value: why" -> "ORIGIN value: why")
    const std::string flag = spec->flag();
    if (source != Source::kCli)
      m = m.rfind(flag, 0) == 0 ? origin + m.substr(flag.size())
                                : origin + ": " + m.substr(m.find(':') + 2);
    return InvalidArgument(m);
  }
  auto it = values_.find(spec->name);
  if (it != values_.end() && static_cast<int>(it->second.source) <= static_cast<int>(source))
    return OkStatus();  // a higher- (or equal-) precedence source already set it
  values_[spec->name] = ExplicitValue{*v, source, origin, text};
  return OkStatus();
}

const ExplicitValue* ExplicitSettings::Get(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? nullptr : &it->second;
}

nlohmann::json ExplicitSettings::ValueOrDefault(const std::string& name) const {
  const OptionSpec* spec = FindOption(name);
  LUCID_CHECK(spec != nullptr && spec->applies_to(command_),
              "ValueOrDefault: " + name + " is not an option of " + CommandName(command_));
  if (const ExplicitValue* v = Get(spec->name)) return v->value;
  return DefaultValue(*spec);
}

std::string ExplicitSettings::String(const std::string& name) const {
  const nlohmann::json v = ValueOrDefault(name);
  LUCID_CHECK(v.is_string(), "ExplicitSettings::String: " + name + " is not a string option");
  return v.get<std::string>();
}

int64_t ExplicitSettings::Int(const std::string& name) const {
  const nlohmann::json v = ValueOrDefault(name);
  LUCID_CHECK(v.is_number_integer(), "ExplicitSettings::Int: " + name + " has no integer value");
  return v.get<int64_t>();
}

double ExplicitSettings::Number(const std::string& name) const {
  const nlohmann::json v = ValueOrDefault(name);
  LUCID_CHECK(v.is_number(), "ExplicitSettings::Number: " + name + " has no numeric value");
  return v.get<double>();
}

bool ExplicitSettings::Bool(const std::string& name) const {
  const nlohmann::json v = ValueOrDefault(name);
  LUCID_CHECK(v.is_boolean(), "ExplicitSettings::Bool: " + name + " is not a boolean option");
  return v.get<bool>();
}

Status LoadConfigFile(const std::string& path, ExplicitSettings* s) {
  std::ifstream f(path);
  if (!f) return NotFound("config file " + path + ": cannot be read");
  std::stringstream buf;
  buf << f.rdbuf();
  const std::string text = buf.str();
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return OkStatus();
  if (text[first] != '{') return LoadYaml(path, text, s);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return InvalidArgument("config file " + path + ": malformed JSON (expected an object)");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it->is_object() || it->is_array())
      return InvalidArgument(path + ": key \"" + it.key() + "\" must be a scalar");
    LUCID_RETURN_IF_ERROR(
        s->Set(it.key(), JsonScalarText(*it), Source::kFile, path + ": " + it.key()));
  }
  return OkStatus();
}

Status LoadEnvironment(const EnvLookup& getenv, ExplicitSettings* s) {
  for (const OptionSpec& o : Options()) {
    // The environment sets plan options only: a tool's own arguments (--prompt, --out) are
    // given on its command line.
    if (!o.in_plan() || !o.applies_to(s->command())) continue;
    const std::string env = o.env_name();
    const char* v = getenv(env.c_str());
    if (v != nullptr && *v != '\0') LUCID_RETURN_IF_ERROR(s->Set(o.name, v, Source::kEnv, env));
  }
  for (const char* name : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", kOmpMarkerVariable}) {
    const char* v = getenv(name);
    if (v != nullptr && *v != '\0') s->SetProcessVariable(name, v);
  }
  return OkStatus();
}

}  // namespace lucid::config

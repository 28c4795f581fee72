// Explicit settings: what the user set, where, before anything is resolved.
//
// Sources in precedence order: command line, config file, environment (LUCID_<NAME>), default.
// A value from a lower-precedence source never replaces one from a higher one. Every value is
// validated by the option table's parser when it is set, so errors name the source (the flag,
// the file and key, or the environment variable).
// The config file holds the same keys as the flags: a JSON object ({"tp-size": 8}) or a flat YAML
// mapping (`tp-size: 8` per line, `#` comments); keys may use '-' or '_'.
// Thread-safety: a value type; no shared state.
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "config/option_table.h"
#include "core/status.h"

namespace lucid::config {

enum class Source { kCli, kFile, kEnv, kDefault, kRule };
// "user:cli", "user:file", "user:env", "default", "rule".
const char* SourceName(Source s);
inline bool IsUser(Source s) {
  return s == Source::kCli || s == Source::kFile || s == Source::kEnv;
}

struct ExplicitValue {
  nlohmann::json value;  // parsed by the option table (null = the user said "auto")
  Source source = Source::kCli;
  std::string origin;  // "--tp-size", "cfg.yaml: tp_size", "LUCID_TP_SIZE"
  std::string text;    // as written
};

class ExplicitSettings {
 public:
  // Settings for subcommand `command`: only its options (option_table.h `commands`) are accepted.
  explicit ExplicitSettings(Command command = kServe) : command_(command) {}
  Command command() const { return command_; }

  // Parses `text` for option `name` (any accepted spelling) and keeps it unless a source of
  // higher precedence already set it. InvalidArgument naming `origin` for an unknown option or a
  // bad value.
  Status Set(const std::string& name, const std::string& text, Source source,
             const std::string& origin);
  // The explicit value of the option with canonical name `name`, or nullptr.
  const ExplicitValue* Get(const std::string& name) const;
  const std::map<std::string, ExplicitValue>& values() const { return values_; }
  // Removes a value (used to ask "what if this setting were left unset").
  void Erase(const std::string& name) { values_.erase(name); }
  // Process variables that are not options but that a rule depends on (OMP_WAIT_POLICY,
  // GOMP_SPINCOUNT: config/wait_policy.h), as LoadEnvironment found them (set and non-empty).
  void SetProcessVariable(const std::string& name, const std::string& value) {
    process_variables_[name] = value;
  }
  const std::map<std::string, std::string>& process_variables() const { return process_variables_; }

  // A tool's own argument (option_table.h): the user's value, else the table's default (null for
  // an `auto` default). Aborts for a name that is not an option of this command; the typed forms
  // abort when the value has another type (the table's parser made it, so that is a bug).
  nlohmann::json ValueOrDefault(const std::string& name) const;
  std::string String(const std::string& name) const;
  int64_t Int(const std::string& name) const;
  double Number(const std::string& name) const;
  bool Bool(const std::string& name) const;

 private:
  Command command_;
  std::map<std::string, ExplicitValue> values_;  // canonical name -> value
  std::map<std::string, std::string> process_variables_;
};

// Reads a config file (see file comment) into `s` with Source::kFile. Errors are one line naming
// the file (and the key or line).
Status LoadConfigFile(const std::string& path, ExplicitSettings* s);

// Reads LUCID_<NAME> for every plan option of s's command into `s` with Source::kEnv, and the
// process variables rules depend on (see SetProcessVariable). `getenv` is injectable for tests.
using EnvLookup = std::function<const char*(const char*)>;
Status LoadEnvironment(const EnvLookup& getenv, ExplicitSettings* s);

}  // namespace lucid::config

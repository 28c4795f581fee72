// Server log lines: "<UTC time> <LEVEL> <message>" on stderr, one line each, below a threshold
// set once at start-up (--log-level). Thread-safety: lines from many threads never interleave.
#pragma once

#include <string>

namespace lucid::server {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// "debug" | "info" | "warning" | "error"; anything else leaves the level unchanged.
void SetLogLevel(const std::string& name);
bool LogEnabled(LogLevel level);
void Log(LogLevel level, const std::string& message);
inline void LogDebug(const std::string& m) { Log(LogLevel::kDebug, m); }
inline void LogInfo(const std::string& m) { Log(LogLevel::kInfo, m); }
inline void LogWarning(const std::string& m) { Log(LogLevel::kWarning, m); }
inline void LogError(const std::string& m) { Log(LogLevel::kError, m); }

}  // namespace lucid::server

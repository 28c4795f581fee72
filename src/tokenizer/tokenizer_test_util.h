// Test helpers shared by the tokenizer tests: fixture paths and file reading.
#pragma once

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace lucid::tok::testing {

inline std::string SourceDir() {
  if (const char* e = std::getenv("LUCID_SOURCE_DIR")) return e;
#ifdef LUCID_SOURCE_DIR
  return LUCID_SOURCE_DIR;
#else
  return ".";
#endif
}

inline std::string FixturePath(const std::string& rel) {
  return SourceDir() + "/tests/fixtures/" + rel;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace lucid::tok::testing

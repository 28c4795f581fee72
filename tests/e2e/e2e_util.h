// Helpers shared by the end-to-end tests: run a shell command (the real `lucid` binary) and
// capture what it prints, and find files of the source tree.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace lucid::e2e {

struct Result {
  int code = -1;    // exit status (-1: did not exit normally)
  std::string out;  // stdout, and stderr unless the command redirects it
};

// Runs `cmd` with /bin/sh; stderr is captured with stdout when merge_stderr, else left alone.
inline Result Shell(const std::string& cmd, bool merge_stderr = true) {
  Result r;
  FILE* p = popen((merge_stderr ? cmd + " 2>&1" : cmd).c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline std::string Lucid() { return LUCID_BINARY; }
inline std::string Src(const std::string& rel) { return std::string(LUCID_SOURCE_DIR) + "/" + rel; }

}  // namespace lucid::e2e

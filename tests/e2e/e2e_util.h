// Helpers shared by the end-to-end tests: run a shell command (the real `lucid` binary) and
// capture what it prints, find files of the source tree, write token ids as flags take them, and a
// fixture with a scratch directory per test.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "core/tensor.h"

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

// An int64 tensor of token ids as `--prompt-ids` takes them and `generate` prints them: "1,2,3".
inline std::string JoinIds(const Tensor& ids) {
  std::string s;
  for (int64_t i = 0; i < ids.numel(); ++i)
    s += (i ? "," : "") + std::to_string(ids.data<int64_t>()[i]);
  return s;
}

// A fixture whose tests each get dir_, a path under the temp directory that does not exist when
// the test starts and is removed with its contents after it.
class ScratchDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("lucid_e2e_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

}  // namespace lucid::e2e

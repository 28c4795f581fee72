// libFuzzer target: safetensors header parsing and validation (src/formats/safetensors.cpp). The
// input is written as a file (the parser reads files) and opened; any input: no crash, and an
// accepted file has tensors that lie inside it.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir ? dir : "/tmp") + "/lucid_safetensors_fuzz_" +
           std::to_string(getpid()) + ".safetensors";
  }();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  auto file = lucid::SafetensorsFile::Open(path);
  std::remove(path.c_str());
  return 0;
}

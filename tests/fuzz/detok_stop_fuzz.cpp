// libFuzzer target: the incremental detokenizer on arbitrary (in-vocabulary) ids, and the
// stop-string filter over its deltas (src/tokenizer, src/runtime/stop_string_filter.cpp). Input:
// stop strings separated by '\n', a 0 byte, then ids as 16-bit pairs. Any input: no crash; the
// filter emits a prefix of the streamed text that contains no stop string; it stops exactly when
// the streamed text contains one, and then the emitted text plus the stop string is a prefix too.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "runtime/stop_string_filter.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace {

std::unique_ptr<lucid::tok::Tokenizer> g_byte, g_spm;

std::unique_ptr<lucid::tok::Tokenizer> Load(const char* name) {
  const char* env = std::getenv("LUCID_SOURCE_DIR");
  const std::string root = env ? env : LUCID_SOURCE_DIR;
  auto t = lucid::tok::Tokenizer::FromFile(root + "/tests/fixtures/tokenizers/" + name +
                                           "/tokenizer.json");
  if (!t.ok()) {
    std::fprintf(stderr, "%s\n", t.status().ToString().c_str());
    std::abort();
  }
  return std::move(t).value();
}

void Run(const lucid::tok::Tokenizer& tok, const std::vector<std::string>& stops,
         const uint8_t* ids_data, size_t n, bool skip_special) {
  std::vector<int32_t> ids;
  const size_t vocab = tok.vocab_size();
  for (size_t i = 0; i + 2 <= n; i += 2)
    ids.push_back(static_cast<int32_t>((size_t(ids_data[i]) << 8 | ids_data[i + 1]) % vocab));
  lucid::tok::IncrementalDetokenizer d(&tok, skip_special);
  lucid::StopStringFilter filter(stops);
  std::string streamed, emitted;
  for (int32_t id : ids) {
    const std::string piece = d.Add(id);
    streamed += piece;
    if (!filter.stopped()) emitted += filter.Push(piece);
  }
  const std::string tail = d.Finish();
  streamed += tail;
  if (!filter.stopped()) emitted += filter.Push(tail);
  if (!filter.stopped()) emitted += filter.Flush();
  if (streamed.compare(0, emitted.size(), emitted) != 0) std::abort();
  bool contains = false;
  for (const auto& s : stops) {
    if (emitted.find(s) != std::string::npos) std::abort();
    contains |= streamed.find(s) != std::string::npos;
  }
  if (filter.stopped() != contains) std::abort();
  if (filter.stopped()) {
    if (streamed.compare(0, emitted.size() + filter.matched().size(), emitted + filter.matched()))
      std::abort();
  } else if (emitted != streamed) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_byte = Load("deepseek-coder");
  g_spm = Load("llama-spm");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t split = 0;
  while (split < size && data[split] != 0) ++split;
  std::vector<std::string> stops;
  std::string cur;
  for (size_t i = 0; i < split; ++i) {
    if (data[i] == '\n') {
      if (!cur.empty()) stops.push_back(cur);
      cur.clear();
    } else {
      cur += static_cast<char>(data[i]);
    }
  }
  if (!cur.empty()) stops.push_back(cur);
  const uint8_t* ids = data + std::min(size, split + 1);
  const size_t n = size - std::min(size, split + 1);
  Run(*g_byte, stops, ids, n, false);
  Run(*g_spm, stops, ids, n, true);
  return 0;
}

// StopStringFilter: holds generated text back until it cannot be part of a stop string.
//
// Text arrives in pieces (the incremental detokenizer's deltas). Push returns the text that is safe
// to emit: everything except the longest tail that is a proper prefix of some stop string. When a
// stop string appears, Push returns the text before it, and stopped() is true; the stop string and
// anything after it are never emitted (OpenAI semantics). Flush returns what was held back at the
// end of the stream (when it did not stop on a stop string).
// Invariant: the emitted text never ends with a proper prefix of a stop string, so a stop string
// can only start inside the held-back text; searching the pending text alone is exact.
// Thread-safety: one instance per request.
#pragma once

#include <string>
#include <vector>

namespace lucid {

class StopStringFilter {
 public:
  explicit StopStringFilter(std::vector<std::string> stops);

  std::string Push(const std::string& piece);
  std::string Flush();
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace lucid

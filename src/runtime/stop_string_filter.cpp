#include "runtime/stop_string_filter.h"

#include <algorithm>
#include <utility>

namespace lucid {

StopStringFilter::StopStringFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopStringFilter::Push(const std::string& piece) {
  if (stopped_) return "";
  pending_ += piece;
  if (stops_.empty()) return std::exchange(pending_, std::string());
  // The earliest stop string occurrence (the longest one on a tie) ends the stream.
  size_t at = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t p = pending_.find(s);
    if (p != std::string::npos && (p < at || (p == at && s.size() > matched_.size()))) {
      at = p;
      matched_ = s;
    }
  }
  if (at != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, at);
    pending_.clear();
    return out;
  }
  // Hold back the longest tail of pending_ that is a proper prefix of a stop string.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len)
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopStringFilter::Flush() {
  if (stopped_) return "";
  return std::exchange(pending_, std::string());
}

}  // namespace lucid

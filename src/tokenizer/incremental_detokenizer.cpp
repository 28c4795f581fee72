#include "tokenizer/incremental_detokenizer.h"

namespace lucid::tok {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

bool EndsWithReplacement(const std::string& s) {
  return s.size() >= kReplacement.size() &&
         s.compare(s.size() - kReplacement.size(), kReplacement.size(), kReplacement) == 0;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer* tokenizer, bool skip_special_tokens,
                                               std::span<const int32_t> context)
    : tok_(tokenizer), skip_special_(skip_special_tokens), ids_(context.begin(), context.end()) {
  read_offset_ = ids_.size();
}

std::string IncrementalDetokenizer::Add(int32_t id) {
  ids_.push_back(id);
  const std::span<const int32_t> all(ids_);
  const std::string prefix_text =
      tok_->Decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_);
  const std::string new_text = tok_->Decode(all.subspan(prefix_offset_), skip_special_);
  if (new_text.size() > prefix_text.size() && !EndsWithReplacement(new_text) &&
      new_text.compare(0, prefix_text.size(), prefix_text) == 0) {
    prefix_offset_ = read_offset_;
    read_offset_ = ids_.size();
    return new_text.substr(prefix_text.size());
  }
  return "";
}

std::string IncrementalDetokenizer::Finish() {
  const std::span<const int32_t> all(ids_);
  const std::string prefix_text =
      tok_->Decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_);
  const std::string new_text = tok_->Decode(all.subspan(prefix_offset_), skip_special_);
  prefix_offset_ = read_offset_ = ids_.size();
  if (new_text.size() > prefix_text.size() &&
      new_text.compare(0, prefix_text.size(), prefix_text) == 0) {
    return new_text.substr(prefix_text.size());
  }
  return "";
}

}  // namespace lucid::tok

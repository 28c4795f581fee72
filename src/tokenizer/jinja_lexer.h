// Lexer of the Jinja subset: splits a template into text / {{ }} / {% %} segments (applying the
// whitespace rules described in jinja_parser.h) and tokenizes the inside of tags.
// Internal API: throws JinjaError on malformed input.
#pragma once

#include <string>
#include <vector>

namespace lucid::jinja {

struct Segment {
  enum class Kind { kText, kOutput, kStatement };
  Kind kind;
  std::string text;  // literal text, or the tag's inside without delimiters and +/- markers
  int line;
};

std::vector<Segment> SplitTemplate(const std::string& source);

struct Token {
  enum class Kind { kName, kInt, kFloat, kString, kOp, kEnd };
  Kind kind;
  std::string text;  // name, operator, number text, or the decoded string literal
  int line;
};

// Tokens of a tag's inside; the last token is kEnd.
std::vector<Token> TokenizeExpression(const std::string& text, int line);

}  // namespace lucid::jinja

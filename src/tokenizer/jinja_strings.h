// Python str helpers shared by the Jinja builtins (jinja_builtins.cpp, jinja_filters.cpp).
// Pure functions on UTF-8 strings; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace lucid::jinja {

std::vector<int32_t> CodePoints(const std::string& s);
std::string FromCodePoints(const std::vector<int32_t>& cps, size_t b, size_t e);
// str.strip/lstrip/rstrip; `chars` null/None means whitespace.
std::string Strip(const std::string& s, const Value* chars, bool left, bool right);
// mode: 0 lower, 1 upper, 2 title, 3 capitalize.
std::string CaseMap(const std::string& s, int mode);
// str.split(sep, maxsplit); `sep` null/None splits on whitespace runs.
Array Split(const std::string& s, const Value* sep, int64_t maxsplit);
std::string Replace(const std::string& s, const std::string& a, const std::string& b,
                    int64_t count);

}  // namespace lucid::jinja

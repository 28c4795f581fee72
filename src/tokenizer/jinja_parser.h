// Parser of the Jinja subset used by chat templates.
//
// Lexing follows Jinja2 with the settings transformers uses for chat templates: trim_blocks and
// lstrip_blocks on, `-`/`+` whitespace control, newlines normalized to \n, and one trailing
// newline of the source dropped (keep_trailing_newline=False). Statements: if/elif/else,
// for (tuple targets, `if` filter, else, break/continue), set (names, tuples, ns.attr, block
// set), macro, call blocks, filter blocks, raw, and transformers' generation tag (parsed as its
// body). Internal API: throws JinjaError (message + line); ChatTemplate converts it to a Status.
#pragma once

#include <memory>
#include <string>

#include "tokenizer/jinja_ast.h"

namespace lucid::jinja {

std::unique_ptr<Template> ParseTemplate(const std::string& source);

}  // namespace lucid::jinja

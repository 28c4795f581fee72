#!/usr/bin/env python3
"""Writes tests/fixtures/tool_calls/recorded.json for src/server/tool_call_parser_test.cpp: model
outputs that carry tool calls, each with the calls, content and reasoning a parser must read back.

Every output is rendered by Python jinja2 through the model's own chat template
(tests/fixtures/chat_templates): GLM-4.6 for the glm45 format, GLM-4.7-Flash for glm47 (GLM-4.7's
markup, which GLM-5 writes too), DeepSeek-V3.1 for deepseekv31, DeepSeek-V3.2 for deepseekv32 (DSML).
An assistant message with `tool_calls` (and, where the template keeps it, `reasoning_content`) is
rendered after a user turn, and the text after the generation prompt is what the model would have
written (the end-of-turn token removed, since the engine never puts a stop token in the text).
`prompt_tail` is the end of the generation prompt, which tells whether the model starts inside a
<think> block. The template is compiled as transformers compiles chat templates
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, tojson with
ensure_ascii=False, raise_exception); transformers itself is not needed.
Run: python3 tools/reference/tokenizer/gen_tool_call_fixtures.py (jinja2==3.1.6, requirements.txt)
"""
import json
import os

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
TPL_DIR = os.path.join(ROOT, "tests", "fixtures", "chat_templates")
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "tool_calls")

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "days": {"type": "integer"},
            "units": {"type": "object"}, "hourly": {"type": "boolean"}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Web search",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "top": {"type": "number"}}}}},
]

CALLS = {
    "one_call": [{"name": "get_weather", "arguments": {"city": "Zürich", "days": 2}}],
    "two_calls": [
        {"name": "get_weather",
         "arguments": {"city": "Paris", "units": {"temp": "C"}, "hourly": True}},
        {"name": "search", "arguments": {"query": "a \"quoted\" <b>tag</b>\nline", "top": 2.5}},
    ],
}


def compile_template(src):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(src)


def rendered_output(template, bos, eos, calls, content, extra, reasoning=""):
    tpl = compile_template(open(os.path.join(TPL_DIR, template), encoding="utf-8").read())
    user = [{"role": "user", "content": "Help me."}]
    tool_calls = [{"type": "function", "id": f"call_{i}", "function": c}
                  for i, c in enumerate(calls)]
    ctx = dict(extra, tools=TOOLS, bos_token=bos, eos_token=eos, documents=None)
    prefix = tpl.render(messages=user, add_generation_prompt=True, **ctx)
    assistant = {"role": "assistant", "content": content, "tool_calls": tool_calls}
    if reasoning:
        assistant["reasoning_content"] = reasoning
    full = tpl.render(messages=user + [assistant],
                      add_generation_prompt=False, **ctx)
    assert full.startswith(prefix), (template, prefix[-80:], full[:len(prefix) + 80])
    out = full[len(prefix):]
    for end in (eos, "<｜end▁of▁sentence｜>"):
        if end and out.endswith(end):
            out = out[:-len(end)]
    return prefix, out


# (format, template, bos, eos, extra context, reasoning written in the assistant turn)
RENDERINGS = [
    # GLM-4.6 drops empty content and strips it; the model's own text between the think block
    # and the call is "\n" + content.
    ("glm45", "GLM-4.6.jinja", "", "<|endoftext|>", {}, ""),
    ("deepseekv31", "deepseek-ai-DeepSeek-V3.1.jinja", "<｜begin▁of▁sentence｜>",
     "<｜end▁of▁sentence｜>", {}, ""),
    # GLM-4.7: thinking off (the prompt ends "</think>") and on (the prompt opens <think>, the
    # template keeps the current turn's reasoning_content).
    ("glm47", "GLM-4.7-Flash.jinja", "", "", {"enable_thinking": False}, ""),
    ("glm47", "GLM-4.7-Flash.jinja", "", "", {"enable_thinking": True},
     "The user needs the weather."),
    # DeepSeek-V3.2 in thinking mode (its non-thinking generation prompt "<think></think>" is not
    # how the template renders a past turn, "</think>", so only thinking mode renders as a prefix).
    ("deepseekv32", "deepseek-ai-DeepSeek-V3.2.jinja", "<｜begin▁of▁sentence｜>",
     "<｜end▁of▁sentence｜>", {"thinking": True}, ""),
    ("deepseekv32", "deepseek-ai-DeepSeek-V3.2.jinja", "<｜begin▁of▁sentence｜>",
     "<｜end▁of▁sentence｜>", {"thinking": True}, "Call the tools."),
]


def main():
    cases = []
    for fmt, template, bos, eos, extra, reasoning in RENDERINGS:
        for calls_name, calls in CALLS.items():
            for content in ("", "Let me check."):
                prefix, out = rendered_output(template, bos, eos, calls, content, extra,
                                              reasoning)
                cases.append({"format": fmt, "source": template, "context": extra,
                              "name": calls_name, "prompt_tail": prefix[-40:], "output": out,
                              "calls": calls, "content": content, "reasoning": reasoning})
    os.makedirs(OUT_DIR, exist_ok=True)
    with open(os.path.join(OUT_DIR, "recorded.json"), "w", encoding="utf-8") as f:
        json.dump({"tools": TOOLS, "cases": cases}, f, ensure_ascii=False, indent=1)
    print(len(cases), "cases")


if __name__ == "__main__":
    main()

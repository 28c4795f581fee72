#!/usr/bin/env python3
"""Writes tests/fixtures/tool_calls/recorded.json for src/server/tool_call_parser_test.cpp: model
outputs that carry tool calls, each with the calls and content a parser must read back.

Where the model's own chat template is a fixture (tests/fixtures/chat_templates: GLM-4.6 for the
glm45 format, DeepSeek-V3.1 for deepseekv31), the output is rendered by Python jinja2 through that
template: an assistant message with `tool_calls` is rendered after a user turn, and the text after
the generation prompt is what the model would have written (the end-of-turn token removed, since
the engine never puts a stop token in the text). The template is compiled as transformers
compiles chat templates (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
tojson with ensure_ascii=False, raise_exception); transformers itself is not needed.

GLM-4.7 / GLM-5 (glm47 format) and DeepSeek-V3.2 (DSML) have no template fixture here: their cases
are written in the format as their model cards and SGLang's detectors document it, and are marked
"source": "documented format".
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


def rendered_output(template, bos, eos, calls, content, extra):
    tpl = compile_template(open(os.path.join(TPL_DIR, template), encoding="utf-8").read())
    user = [{"role": "user", "content": "Help me."}]
    tool_calls = [{"type": "function", "id": f"call_{i}", "function": c}
                  for i, c in enumerate(calls)]
    ctx = dict(extra, tools=TOOLS, bos_token=bos, eos_token=eos, documents=None)
    prefix = tpl.render(messages=user, add_generation_prompt=True, **ctx)
    full = tpl.render(messages=user + [{"role": "assistant", "content": content,
                                        "tool_calls": tool_calls}],
                      add_generation_prompt=False, **ctx)
    assert full.startswith(prefix), (template, prefix[-80:], full[:len(prefix) + 80])
    out = full[len(prefix):]
    for end in (eos, "<｜end▁of▁sentence｜>"):
        if end and out.endswith(end):
            out = out[:-len(end)]
    return prefix, out


def glm47(calls, content):
    text = content
    for c in calls:
        text += "<tool_call>" + c["name"]
        for k, v in c["arguments"].items():
            text += f"<arg_key>{k}</arg_key><arg_value>"
            text += (v if isinstance(v, str) else json.dumps(v, ensure_ascii=False))
            text += "</arg_value>"
        text += "</tool_call>"
    return text


def dsml(calls, content):
    t = "｜DSML｜"
    inv = []
    for c in calls:
        params = []
        for k, v in c["arguments"].items():
            is_str = isinstance(v, str)
            val = v if is_str else json.dumps(v, ensure_ascii=False)
            params.append(f'<{t}parameter name="{k}" string="{"true" if is_str else "false"}">'
                          f'{val}</{t}parameter>')
        inv.append(f'<{t}invoke name="{c["name"]}">\n' + "\n".join(params) + f"\n</{t}invoke>")
    return content + f"\n\n<{t}function_calls>\n" + "\n".join(inv) + f"\n</{t}function_calls>"


def main():
    cases = []
    for calls_name, calls in CALLS.items():
        for content in ("", "Let me check."):
            # GLM-4.6's template drops empty content and strips it; the model's own text
            # between the think block and the call is "\n" + content.
            prefix, out = rendered_output("GLM-4.6.jinja", "", "<|endoftext|>", calls, content, {})
            cases.append({"format": "glm45", "source": "GLM-4.6.jinja", "name": calls_name,
                          "prompt_tail": prefix[-40:], "output": out, "calls": calls,
                          "content": content})
            prefix, out = rendered_output("deepseek-ai-DeepSeek-V3.1.jinja",
                                          "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>",
                                          calls, content, {})
            cases.append({"format": "deepseekv31", "source": "deepseek-ai-DeepSeek-V3.1.jinja",
                          "name": calls_name, "prompt_tail": prefix[-40:], "output": out,
                          "calls": calls, "content": content})
            cases.append({"format": "glm47", "source": "documented format", "name": calls_name,
                          "output": glm47(calls, content), "calls": calls, "content": content})
            cases.append({"format": "deepseekv32", "source": "documented format",
                          "name": calls_name, "output": dsml(calls, content), "calls": calls,
                          "content": content})
    os.makedirs(OUT_DIR, exist_ok=True)
    with open(os.path.join(OUT_DIR, "recorded.json"), "w", encoding="utf-8") as f:
        json.dump({"tools": TOOLS, "cases": cases}, f, ensure_ascii=False, indent=1)
    print(len(cases), "cases")


if __name__ == "__main__":
    main()

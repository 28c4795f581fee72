#!/usr/bin/env python3
"""Renders each chat template fixture with Python jinja2, configured exactly as transformers
configures it (transformers.utils.chat_template_utils._compile_jinja_template), for a set of
conversations, and writes tests/fixtures/chat_templates/goldens.json for chat_template_test.cpp.

Context per case, as transformers' render_jinja_template passes it: messages, tools (None when
absent), documents=None, add_generation_prompt, bos_token, eos_token, plus extra kwargs.
A template that raises records {"error": message} instead of the output.
"""
import json
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
TPL_DIR = os.path.join(ROOT, "tests", "fixtures", "chat_templates")

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7.5},
            },
            "required": ["city"],
        },
    },
}]

TOOL_CALL = {"type": "function", "id": "call_1",
             "function": {"name": "get_weather", "arguments": {"city": "Zürich", "days": 2}}}

CONVERSATIONS = {
    "user_only": [{"role": "user", "content": "Hello!"}],
    "system_user": [{"role": "system", "content": "You are a helpful assistant."},
                    {"role": "user", "content": "What is 2+2?"}],
    "multi_turn": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke.\nMake it short."},
    ],
    "unicode": [
        {"role": "user", "content": "  Grüße 👋🏽 — 你好 \"quoted\" 'single' <tag> & \\ \t tab  "},
        {"role": "assistant", "content": "Привет! ✓"},
        {"role": "user", "content": "e\u0301 \u00a0 end"},
    ],
    "reasoning": [
        {"role": "user", "content": "Think about it."},
        {"role": "assistant", "content": "<think>\nLet me think.\n</think>\n\nThe answer is 42."},
        {"role": "user", "content": "Why?"},
    ],
    "tool_call": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "Weather in Zürich?"},
        {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
        {"role": "tool", "content": "{\"temp\": 21.5, \"unit\": \"celsius\"}"},
        {"role": "assistant", "content": "It is 21.5 °C."},
        {"role": "user", "content": "Thanks"},
    ],
}

CASES = [
    ("user_only", None, {}),
    ("system_user", None, {}),
    ("multi_turn", None, {}),
    ("unicode", None, {}),
    ("reasoning", None, {}),
    ("tool_call", TOOLS, {}),
    ("user_only", TOOLS, {}),
    ("multi_turn", None, {"enable_thinking": False}),
    ("system_user", None, {"enable_thinking": True, "date_string": "01 Jan 2025"}),
]

SPECIAL = {
    "GLM-4.6.jinja": ("", "<|endoftext|>"),
    "GLM-4.7-Flash.jinja": ("", "<|endoftext|>"),
    "deepseek-ai-DeepSeek-V3.1.jinja": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek-ai-DeepSeek-V3.2.jinja": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": ("<｜begin▁of▁sentence｜>",
                                                       "<｜end▁of▁sentence｜>"),
    "Qwen-Qwen3-0.6B.jinja": ("", "<|im_end|>"),
    "meta-llama-Llama-3.1-8B-Instruct.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "google-gemma-2-2b-it.jinja": ("<bos>", "<eos>"),
}


def compile_template(src):
    from transformers.utils.chat_template_utils import _compile_jinja_template
    return _compile_jinja_template(src)


from template_snippets import SNIPPETS  # noqa: E402


def main():
    out = []
    for k, src in enumerate(SNIPPETS):
        rec = {"template": f"snippet{k}", "source": src,
               "context": {"messages": [{"role": "user", "content": "hi"}]}}
        try:
            rec["output"] = compile_template(rec["source"]).render(**rec["context"])
        except Exception as e:
            rec["error"] = f"{type(e).__name__}: {e}"
        out.append(rec)
    for name, (bos, eos) in SPECIAL.items():
        src = open(os.path.join(TPL_DIR, name), encoding="utf-8").read()
        tpl = compile_template(src)
        for conv, tools, extra in CASES:
            for agp in (False, True):
                ctx = dict(extra, messages=CONVERSATIONS[conv], tools=tools, documents=None,
                           add_generation_prompt=agp, bos_token=bos, eos_token=eos)
                rec = {"template": name, "conversation": conv, "context": ctx}
                try:
                    rec["output"] = tpl.render(**json.loads(json.dumps(ctx)))
                except Exception as e:  # template raised: the C++ side must fail too
                    rec["error"] = f"{type(e).__name__}: {e}"
                out.append(rec)
    with open(os.path.join(TPL_DIR, "goldens.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
    print(len(out), "cases,", sum("error" in r for r in out), "errors")


if __name__ == "__main__":
    main()

"""End-to-end: tool calls and reasoning through the official `openai` client.

A random tiny model cannot be made to write tool-call markup, so the server here is the test-only
`lucid_scripted_server` (tests/e2e/scripted_server.cpp): lucid's real HttpServer, tokenizer, chat
template and output parsers (glm47 tool calls, <think> reasoning) over a fake engine whose every
answer is a scripted GLM-5 style output. The client must see what it sees from vLLM / SGLang:
message.tool_calls whose function.arguments parses as JSON, finish_reason "tool_calls",
reasoning_content apart from content, streaming or not.
Run: .venv-e2e/bin/python tests/e2e/test_serve_tools.py (ctest runs it as e2e_serve_tools).
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lucid_server as ls  # noqa: E402

try:
    import openai
except ImportError as e:  # pragma: no cover
    sys.exit(f"the e2e tests need the packages of tests/e2e/requirements.txt (scripts/setup.sh "
             f"installs them into .venv-e2e): {e}")

SCRIPTED = os.environ.get("LUCID_SCRIPTED_SERVER",
                          os.path.join(ls.SOURCE_DIR, "build", "tests", "e2e", "lucid_scripted_server"))
# The model's output, in pieces that cut through the markers.
SCRIPT = ["<think>The user wants", " the weather.</th", "ink>Checking.", "<tool_", "call>get_weather",
          "<arg_key>city</arg_key><arg_value>Zürich</arg_value>",
          "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>"]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "days": {"type": "integer"}}}}}]
PROC = None
URL = None
TMP = None


def setUpModule():
    global PROC, URL, TMP
    TMP = tempfile.TemporaryDirectory(prefix="lucid-e2e-")
    port_file = os.path.join(TMP.name, "port")
    PROC = subprocess.Popen([SCRIPTED, port_file] + SCRIPT)
    for _ in range(600):
        port = ""
        if os.path.exists(port_file):
            with open(port_file) as f:
                port = f.read().strip()
        if port:
            URL = "http://127.0.0.1:" + port
            return
        if PROC.poll() is not None:
            raise RuntimeError(f"lucid_scripted_server exited with {PROC.returncode}")
        time.sleep(0.05)
    raise RuntimeError("lucid_scripted_server did not start")


def tearDownModule():
    if PROC and PROC.poll() is None:
        PROC.terminate()
        PROC.wait(timeout=30)
    TMP.cleanup()


def client():
    return openai.OpenAI(base_url=URL + "/v1", api_key="unused", max_retries=0, timeout=60)


MESSAGES = [{"role": "user", "content": "Weather in Zürich for 3 days?"}]


class ToolCallsTest(unittest.TestCase):
    def test_non_streaming(self):
        r = client().chat.completions.create(model="scripted", messages=MESSAGES, tools=TOOLS)
        choice = r.choices[0]
        self.assertEqual(choice.finish_reason, "tool_calls")
        self.assertEqual(choice.message.content, "Checking.")
        self.assertEqual(choice.message.model_extra["reasoning_content"], "The user wants the weather.")
        calls = choice.message.tool_calls
        self.assertEqual(len(calls), 1)
        self.assertEqual(calls[0].type, "function")
        self.assertTrue(calls[0].id.startswith("call_"))
        self.assertEqual(calls[0].function.name, "get_weather")
        self.assertEqual(json.loads(calls[0].function.arguments), {"city": "Zürich", "days": 3})

    def test_streaming_assembles_like_the_client_does(self):
        stream = client().chat.completions.create(model="scripted", messages=MESSAGES, tools=TOOLS,
                                                  stream=True)
        content, reasoning, finish = "", "", None
        calls = {}
        for chunk in stream:
            if not chunk.choices:
                continue
            d = chunk.choices[0].delta
            content += d.content or ""
            reasoning += (d.model_extra or {}).get("reasoning_content") or ""
            for tc in d.tool_calls or []:
                call = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                if tc.id:
                    call["id"] = tc.id
                if tc.function and tc.function.name:
                    self.assertEqual(call["arguments"], "", "the name comes before the arguments")
                    call["name"] += tc.function.name
                if tc.function and tc.function.arguments:
                    call["arguments"] += tc.function.arguments
            finish = chunk.choices[0].finish_reason or finish
        self.assertEqual(finish, "tool_calls")
        self.assertEqual(content, "Checking.")
        self.assertEqual(reasoning, "The user wants the weather.")
        self.assertEqual(list(calls), [0])
        self.assertTrue(calls[0]["id"].startswith("call_"))
        self.assertEqual(calls[0]["name"], "get_weather")
        self.assertEqual(json.loads(calls[0]["arguments"]), {"city": "Zürich", "days": 3})

    def test_without_tools_the_markup_is_content(self):
        r = client().chat.completions.create(model="scripted", messages=MESSAGES)
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertIsNone(r.choices[0].message.tool_calls)
        self.assertTrue(r.choices[0].message.content.startswith("Checking.<tool_call>get_weather"))


if __name__ == "__main__":
    unittest.main()

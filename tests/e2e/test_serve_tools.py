"""End-to-end: tool calls and reasoning through the official `openai` client.

A random tiny model cannot be made to write tool-call markup, so the server here is the test-only
`lucid_scripted_server` (tests/e2e/scripted_server.cpp): lucid's real HttpServer, tokenizer, chat
template and output parsers (glm47 or deepseekv32 tool calls, <think> reasoning) over a fake
engine whose every answer is a scripted GLM-5 or DeepSeek-V3.2 style output. The client must see
what it sees from vLLM / SGLang: message.tool_calls whose function.arguments parses as JSON,
finish_reason "tool_calls", reasoning_content apart from content, streaming or not, and in a
stream the name first, then the arguments in pieces as the model writes them.
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
# DeepSeek-V3.2's DSML, as its chat template writes a call (tests/fixtures/tool_calls), cut so
# that a string value arrives in several pieces.
DSML = "｜DSML｜"
DSML_SCRIPT = ["On it.\n\n<" + DSML + "function_calls>\n<" + DSML + 'invoke name="get_weather">\n<',
               DSML + 'parameter name="city" string="true">San', " Francisco,", " CA</" + DSML,
               "parameter>\n<" + DSML + 'parameter name="days" string="false">3</' + DSML + "parameter>\n</",
               DSML + "invoke>\n</" + DSML + "function_calls>"]
SERVERS = {}
TMP = None


def start_server(name, script, flags=()):
    port_file = os.path.join(TMP.name, name + ".port")
    proc = subprocess.Popen([SCRIPTED, *flags, port_file, *script])
    SERVERS[name] = {"proc": proc}
    for _ in range(600):
        port = ""
        if os.path.exists(port_file):
            with open(port_file) as f:
                port = f.read().strip()
        if port:
            SERVERS[name]["url"] = "http://127.0.0.1:" + port
            return
        if proc.poll() is not None:
            raise RuntimeError(f"lucid_scripted_server exited with {proc.returncode}")
        time.sleep(0.05)
    raise RuntimeError("lucid_scripted_server did not start")


def setUpModule():
    global TMP
    TMP = tempfile.TemporaryDirectory(prefix="lucid-e2e-")
    start_server("glm47", SCRIPT)
    start_server("deepseekv32", DSML_SCRIPT, ["--tool-call-parser=deepseekv32"])


def tearDownModule():
    for s in SERVERS.values():
        if s["proc"].poll() is None:
            s["proc"].terminate()
            s["proc"].wait(timeout=30)
    TMP.cleanup()


def client(server="glm47"):
    return openai.OpenAI(base_url=SERVERS[server]["url"] + "/v1", api_key="unused", max_retries=0,
                         timeout=60)


def assemble(test, stream):
    """Assembles a chat stream as the openai client's users do; returns the content, the
    reasoning, the finish reason, the calls by index and the number of argument deltas."""
    content, reasoning, finish, argument_deltas = "", "", None, 0
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
                test.assertIsNone(call["id"], "one id per call")
                test.assertTrue(tc.function and tc.function.name, "the first delta names the call")
                call["id"] = tc.id
            if tc.function and tc.function.name:
                test.assertEqual(call["arguments"], "", "the name comes before the arguments")
                call["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                test.assertIsNotNone(call["id"], "arguments after the call's first delta")
                call["arguments"] += tc.function.arguments
                argument_deltas += 1
        finish = chunk.choices[0].finish_reason or finish
    return content, reasoning, finish, calls, argument_deltas


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
        content, reasoning, finish, calls, argument_deltas = assemble(self, stream)
        self.assertEqual(finish, "tool_calls")
        self.assertEqual(content, "Checking.")
        self.assertEqual(reasoning, "The user wants the weather.")
        self.assertEqual(list(calls), [0])
        self.assertTrue(calls[0]["id"].startswith("call_"))
        self.assertEqual(calls[0]["name"], "get_weather")
        self.assertEqual(json.loads(calls[0]["arguments"]), {"city": "Zürich", "days": 3})
        # The arguments come in pieces as the pairs complete, not in one piece at the end.
        self.assertGreater(argument_deltas, 1)

    def test_without_tools_the_markup_is_content(self):
        r = client().chat.completions.create(model="scripted", messages=MESSAGES)
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertIsNone(r.choices[0].message.tool_calls)
        self.assertTrue(r.choices[0].message.content.startswith("Checking.<tool_call>get_weather"))


class DeepSeekV32ToolCallsTest(unittest.TestCase):
    """The DSML format (--tool-call-parser deepseekv32): a string value streams as it arrives."""

    def test_streaming_arguments_in_pieces(self):
        stream = client("deepseekv32").chat.completions.create(
            model="scripted", messages=MESSAGES, tools=TOOLS, stream=True)
        content, reasoning, finish, calls, argument_deltas = assemble(self, stream)
        self.assertEqual(finish, "tool_calls")
        self.assertEqual(content.strip(), "On it.")
        self.assertEqual(reasoning, "")
        self.assertEqual(list(calls), [0])
        self.assertEqual(calls[0]["name"], "get_weather")
        self.assertEqual(json.loads(calls[0]["arguments"]),
                         {"city": "San Francisco, CA", "days": 3})
        # "San", " Francisco,", " CA" and the rest: the city's value came in several deltas.
        self.assertGreaterEqual(argument_deltas, 4)

    def test_non_streaming_gives_the_same_call(self):
        r = client("deepseekv32").chat.completions.create(model="scripted", messages=MESSAGES,
                                                          tools=TOOLS)
        choice = r.choices[0]
        self.assertEqual(choice.finish_reason, "tool_calls")
        self.assertEqual(choice.message.content.strip(), "On it.")
        self.assertEqual(choice.message.tool_calls[0].function.name, "get_weather")
        self.assertEqual(json.loads(choice.message.tool_calls[0].function.arguments),
                         {"city": "San Francisco, CA", "days": 3})


if __name__ == "__main__":
    unittest.main()

"""End-to-end: `lucid serve` on the real SmolLM2-135M-Instruct (Q4_1 GGUF, scripts/setup.sh puts it
in .cache/models), asked by the official `openai` client for the capital of France at temperature
0, streaming and not; the answer must name Paris, and the streamed text must equal the whole one.
Structured output over the tokenizer built from the GGUF metadata: with a JSON schema as
`response_format`, the answer is an instance of the schema (checked by `jsonschema`) naming Paris.
Skipped (exit 0, saying so) when the GGUF file is absent.
Run: .venv-e2e/bin/python tests/e2e/test_serve_smollm2.py (ctest runs it as e2e_serve_smollm2).
"""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lucid_server as ls  # noqa: E402

try:
    import jsonschema
    import openai
except ImportError as e:  # pragma: no cover
    sys.exit(f"the e2e tests need the packages of tests/e2e/requirements.txt (scripts/setup.sh "
             f"installs them into .venv-e2e): {e}")

GGUF = os.path.join(ls.SOURCE_DIR, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
SERVER = None


def setUpModule():
    global SERVER
    if not os.path.exists(GGUF):
        raise unittest.SkipTest(f"{GGUF} is absent (scripts/setup.sh fetches it)")
    SERVER = ls.LucidServer(GGUF, ["--context-length", "2048"], name="smollm2").start(timeout=300)


def tearDownModule():
    if SERVER is not None:
        assert SERVER.stop() == 0, SERVER.log()[-2000:]


class SmolLm2Chat(unittest.TestCase):
    def client(self):
        return openai.OpenAI(base_url=SERVER.url + "/v1", api_key="none", timeout=300)

    def test_capital_of_france(self):
        r = self.client().chat.completions.create(model="smollm2", messages=QUESTION,
                                                  temperature=0, max_tokens=24)
        text = r.choices[0].message.content
        print(f"\nanswer: {text!r}", file=sys.stderr)
        self.assertIn("Paris", text)
        self.assertGreater(r.usage.completion_tokens, 0)
        stream = self.client().chat.completions.create(model="smollm2", messages=QUESTION,
                                                       temperature=0, max_tokens=24, stream=True)
        streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        self.assertIn("Paris", streamed)
        self.assertEqual(streamed, text)  # greedy: the same tokens either way

    def test_structured_output_follows_the_schema(self):
        schema = {"type": "object", "properties": {"capital": {"type": "string"}},
                  "required": ["capital"]}
        r = self.client().chat.completions.create(
            model="smollm2", temperature=0, max_tokens=40,
            messages=[{"role": "user", "content": "What is the capital of France? Answer in JSON."}],
            response_format={"type": "json_schema",
                             "json_schema": {"name": "answer", "schema": schema}})
        text = r.choices[0].message.content
        print(f"\nstructured answer: {text!r}", file=sys.stderr)
        self.assertEqual(r.choices[0].finish_reason, "stop")
        value = json.loads(text)
        jsonschema.validate(value, schema)
        self.assertIn("Paris", value["capital"])

    def test_models_route_names_it(self):
        ids = [m.id for m in self.client().models.list().data]
        self.assertEqual(ids, ["smollm2"])


if __name__ == "__main__":
    unittest.main(verbosity=2)

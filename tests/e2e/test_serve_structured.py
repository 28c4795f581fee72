"""End-to-end: structured output (response_format, regex, ebnf, forced tool_choice) on the real
`lucid serve` with the official `openai` client; outputs are checked with `jsonschema` and `re`,
which lucid did not write.

Model: the random-weight tiny GLM-5 with the byte-level tokenizer of lucid_server.make_model_dir
(one token per byte). Random weights know no JSON: every output is valid only because the grammar
masks the logits each step. Each schema is built by a seeded generator so that every instance is
bounded in length (strings with maxLength, integers with ranges, arrays with maxItems, objects
with closed properties); max_tokens covers the longest instance, so finish_reason must be "stop"
and the output must validate.
Run: .venv-e2e/bin/python tests/e2e/test_serve_structured.py (ctest: e2e_serve_structured).
"""

import concurrent.futures
import json
import os
import random
import re
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lucid_server as ls  # noqa: E402

try:
    import jsonschema
    import openai
except ImportError as e:  # pragma: no cover
    sys.exit(f"the e2e tests need the packages of tests/e2e/requirements.txt (scripts/setup.sh "
             f"installs them into .venv-e2e): {e}")

SERVER = None
TMP = None
NUM_SCHEMAS = 200
MAX_CHAR_BYTES = 6  # a JSON string character is at most 6 bytes ("\u00e9")


def setUpModule():
    global SERVER, TMP
    TMP = tempfile.TemporaryDirectory(prefix="lucid-e2e-structured-")
    SERVER = ls.LucidServer(ls.make_model_dir(TMP.name), ["--max-running-requests", "32"]).start()


def tearDownModule():
    if _CLIENT is not None:
        _CLIENT.close()
    code = SERVER.stop() if SERVER else 0
    TMP.cleanup()
    if code != 0:
        raise AssertionError(f"lucid serve exited with {code}:\n{SERVER.log()[-3000:]}")


_CLIENT = None


def client():
    # One client for the module, shared by the threads (the openai client is thread-safe): a
    # client per call left each call's keep-alive connection open until the garbage collector
    # freed it, and 200 requests in a few seconds then held more than the server's
    # per-client connection allowance (136), past which a connection whose request is not there
    # within 250 ms is closed unanswered (server/guarded_server.h) -- on a busy 2-core machine
    # that made one request in a few runs fail with a disconnect.
    global _CLIENT
    if _CLIENT is None:
        _CLIENT = openai.OpenAI(base_url=SERVER.url + "/v1", api_key="unused", max_retries=0,
                                timeout=300)
    return _CLIENT


def chat(messages="Answer in JSON.", **kw):
    return client().chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": messages}], **kw)


# ---- a seeded generator of bounded schemas; max_len(schema) bounds the compact instance ----

WORDS = ["red", "green", "blue", "alpha", "beta", "x", "y2", "long_name", "on", "off"]


def gen_leaf(rng):
    kind = rng.choice(["boolean", "null", "enum", "int_range", "neg_int_range", "string",
                       "const"])
    if kind == "boolean":
        return {"type": "boolean"}
    if kind == "null":
        return {"type": "null"}
    if kind == "enum":
        values = rng.sample(WORDS, rng.randint(1, 4))
        if rng.random() < 0.3:
            values.append(rng.randint(0, 99))
        return {"enum": values}
    if kind == "const":
        return {"const": rng.choice(WORDS)}
    if kind in ("int_range", "neg_int_range"):
        lo = rng.randint(-50, 0) if kind == "neg_int_range" else rng.randint(0, 20)
        return {"type": "integer", "minimum": lo, "maximum": lo + rng.randint(0, 500)}
    s = {"type": "string", "maxLength": rng.randint(0, 6)}
    if rng.random() < 0.5:
        s["minLength"] = rng.randint(0, s["maxLength"])
    return s


def gen_schema(rng, depth=0):
    r = rng.random()
    if depth >= 2 or r < 0.35:
        return gen_leaf(rng)
    if r < 0.55:
        items = gen_schema(rng, depth + 1)
        return {"type": "array", "items": items, "minItems": rng.randint(0, 1),
                "maxItems": rng.randint(1, 3)}
    return gen_object(rng, depth)


def gen_object(rng, depth=0):
    names = rng.sample(["id", "name", "kind", "size", "tags", "meta", "ok", "value", "a", "b"],
                       rng.randint(1, 4))
    props = {n: gen_schema(rng, depth + 1) for n in names}
    obj = {"type": "object", "properties": props,
           "required": [n for n in names if rng.random() < 0.6]}
    if rng.random() < 0.5:
        obj["additionalProperties"] = False
    return obj


def max_len(s):
    """An upper bound on the bytes of a compact instance of `s`."""
    if "enum" in s:
        return max(len(json.dumps(v)) for v in s["enum"])
    if "const" in s:
        return len(json.dumps(s["const"]))
    t = s["type"]
    if t == "boolean":
        return 5
    if t == "null":
        return 4
    if t == "integer":
        return max(len(str(s["minimum"])), len(str(s["maximum"])))
    if t == "string":
        return 2 + MAX_CHAR_BYTES * s["maxLength"]
    if t == "array":
        return 2 + s["maxItems"] * (max_len(s["items"]) + 1)
    return 2 + sum(len(json.dumps(k)) + 2 + max_len(v) for k, v in s["properties"].items())


def schemas():
    rng = random.Random(2024)
    out = []
    for _ in range(NUM_SCHEMAS):
        s = gen_object(rng)  # response_format json_schema wants an object at the top
        if rng.random() < 0.3:
            s["description"] = "generated"
        out.append(s)
    return out


class JsonSchemaTest(unittest.TestCase):
    def test_200_generated_schemas_all_validate(self):
        cases = schemas()
        kinds = set()

        def walk(s):
            kinds.add(s.get("type", "enum" if "enum" in s else "const"))
            for v in s.get("properties", {}).values():
                walk(v)
            if "items" in s:
                walk(s["items"])

        for s in cases:
            walk(s)
        self.assertTrue({"object", "array", "string", "integer", "boolean", "null", "enum",
                         "const"} <= kinds, kinds)

        def one(i):
            s = cases[i]
            r = chat(max_tokens=max_len(s) + 8, temperature=1.0, seed=i,
                     response_format={"type": "json_schema", "json_schema": {
                         "name": f"schema_{i}", "schema": s, "strict": i % 2 == 0}})
            return r.choices[0]

        with concurrent.futures.ThreadPoolExecutor(32) as ex:
            results = list(ex.map(one, range(len(cases))))
        distinct = set()
        for i, (s, c) in enumerate(zip(cases, results)):
            with self.subTest(schema=i):
                self.assertEqual(c.finish_reason, "stop", (s, c.message.content))
                value = json.loads(c.message.content)
                jsonschema.validate(value, s)
                distinct.add(c.message.content)
        self.assertGreater(len(distinct), NUM_SCHEMAS // 2, "outputs should vary with the schema")

    def test_streamed_output_validates_and_equals_the_whole_response(self):
        s = schemas()[7]
        kw = dict(max_tokens=max_len(s) + 8, temperature=1.0, seed=5,
                  response_format={"type": "json_schema",
                                   "json_schema": {"name": "s", "schema": s}})
        whole = chat(**kw).choices[0].message.content
        text = "".join(ch.choices[0].delta.content or "" for ch in chat(stream=True, **kw)
                       if ch.choices)
        self.assertEqual(text, whole)
        jsonschema.validate(json.loads(text), s)

    def test_json_object_gives_objects(self):
        stopped = 0
        for seed in range(8):
            c = chat(max_tokens=300, temperature=1.0, seed=seed,
                     response_format={"type": "json_object"}).choices[0]
            if c.finish_reason == "stop":
                stopped += 1
                self.assertIsInstance(json.loads(c.message.content), dict, c.message.content)
            else:  # an object without a schema is unbounded: cut, but a prefix of one
                self.assertTrue(c.message.content.startswith("{"), c.message.content)
        self.assertGreater(stopped, 0)

    def test_generate_route_takes_sglang_json_schema(self):
        import urllib.request
        s = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0,
                                                    "maximum": 9}}, "required": ["n"]}
        body = json.dumps({"text": "x", "sampling_params": {
            "json_schema": json.dumps(s), "max_new_tokens": 32, "temperature": 1.0,
            "seed": 3}}).encode()
        req = urllib.request.Request(SERVER.url + "/generate", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            out = json.load(r)
        self.assertEqual(out["meta_info"]["finish_reason"]["type"], "stop")
        jsonschema.validate(json.loads(out["text"]), s)


REGEXES = [r"[a-z]{1,8}@[a-z]{1,5}\.(com|org)", r"\d{3}-\d{4}", r"(yes|no|maybe)",
           r"#[0-9a-f]{6}", r"[A-Z][a-z]{0,5}( [A-Z][a-z]{0,5}){0,2}", r"-?(0|[1-9]\d{0,3})"]


class RegexEbnfTest(unittest.TestCase):
    def test_regex_outputs_match(self):
        c = client()
        for k, pattern in enumerate(REGEXES):
            for seed in range(4):
                with self.subTest(pattern=pattern, seed=seed):
                    r = c.completions.create(model="tiny", prompt="value:", max_tokens=40,
                                             temperature=1.0, seed=seed,
                                             extra_body={"regex": pattern}).choices[0]
                    self.assertEqual(r.finish_reason, "stop")
                    self.assertIsNotNone(re.fullmatch(pattern, r.text), r.text)
        r = chat(max_tokens=40, seed=1, extra_body={"regex": REGEXES[0]}).choices[0]
        self.assertIsNotNone(re.fullmatch(REGEXES[0], r.message.content))

    def test_ebnf_output_follows_the_grammar(self):
        grammar = 'root ::= "(" num ("+" num){0,3} ")"\nnum ::= [1-9] [0-9]{0,2}'
        for seed in range(4):
            r = client().completions.create(model="tiny", prompt="sum:", max_tokens=40,
                                            temperature=1.0, seed=seed,
                                            extra_body={"ebnf": grammar}).choices[0]
            self.assertEqual(r.finish_reason, "stop")
            self.assertIsNotNone(re.fullmatch(r"\([1-9]\d{0,2}(\+[1-9]\d{0,2}){0,3}\)", r.text),
                                 r.text)

    def test_bad_grammars_are_400s_and_the_server_keeps_serving(self):
        c = client()
        for extra, param in [({"regex": "(unclosed"}, "regex"),
                             ({"ebnf": "root ::= nothing_defined"}, "ebnf"),
                             ({"response_format": {"type": "json_schema", "json_schema": {
                                 "name": "x", "schema": {"type": "frobnicate"}}}},
                              "response_format")]:
            with self.subTest(param=param):
                with self.assertRaises(openai.BadRequestError) as cm:
                    c.chat.completions.create(model="tiny", max_tokens=4, extra_body=extra,
                                              messages=[{"role": "user", "content": "x"}])
                self.assertEqual(cm.exception.body["param"], param)
        self.assertEqual(chat(max_tokens=2).choices[0].finish_reason, "length")


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {
            "city": {"enum": ["Paris", "Oslo", "Lima"]},
            "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"]}}},
    {"type": "function", "function": {"name": "set_volume", "parameters": {
        "type": "object", "properties": {"level": {"type": "integer", "minimum": 0,
                                                   "maximum": 10},
                                         "mute": {"type": "boolean"}},
        "required": ["level"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "ping"}},
]
PARAMS = {t["function"]["name"]: t["function"].get("parameters", {"type": "object"})
          for t in TOOLS}


class ToolChoiceTest(unittest.TestCase):
    def check_calls(self, calls, names=None):
        self.assertTrue(calls)
        for call in calls:
            self.assertEqual(call.type, "function")
            self.assertTrue(call.id.startswith("call_"))
            self.assertIn(call.function.name, names or PARAMS)
            jsonschema.validate(json.loads(call.function.arguments), PARAMS[call.function.name])

    def test_required_always_yields_schema_valid_calls(self):
        def one(seed):
            return chat("What is the weather?", tools=TOOLS, tool_choice="required",
                        max_tokens=460, temperature=1.0, seed=seed).choices[0]

        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            results = list(ex.map(one, range(16)))
        names = set()
        for seed, c in enumerate(results):
            with self.subTest(seed=seed):
                self.assertEqual(c.finish_reason, "tool_calls", c.message.content)
                self.assertIsNone(c.message.content)
                self.check_calls(c.message.tool_calls)
                names.update(call.function.name for call in c.message.tool_calls)
        self.assertGreater(len(names), 1, "random weights should pick different tools")

    def test_named_function_is_called(self):
        for seed in range(4):
            c = chat("Louder.", tools=TOOLS, max_tokens=200, temperature=1.0, seed=seed,
                     tool_choice={"type": "function", "function": {"name": "set_volume"}}
                     ).choices[0]
            self.assertEqual(c.finish_reason, "tool_calls")
            self.assertEqual(len(c.message.tool_calls), 1)
            self.check_calls(c.message.tool_calls, {"set_volume"})

    def test_streamed_required_call(self):
        chunks = list(chat("Weather?", tools=TOOLS, tool_choice="required", max_tokens=460,
                           temperature=1.0, seed=3, stream=True))
        calls = [tc for ch in chunks if ch.choices for tc in (ch.choices[0].delta.tool_calls or [])]
        finish = [ch.choices[0].finish_reason for ch in chunks
                  if ch.choices and ch.choices[0].finish_reason]
        self.assertEqual(finish, ["tool_calls"])
        self.check_calls(calls)
        self.assertEqual([tc.index for tc in calls], list(range(len(calls))))


    def test_streamed_named_call_arguments_in_pieces(self):
        chunks = list(chat("Louder.", tools=TOOLS, max_tokens=200, temperature=1.0, seed=1,
                           tool_choice={"type": "function", "function": {"name": "set_volume"}},
                           stream=True))
        deltas = [tc for ch in chunks if ch.choices for tc in (ch.choices[0].delta.tool_calls or [])]
        finish = [ch.choices[0].finish_reason for ch in chunks
                  if ch.choices and ch.choices[0].finish_reason]
        self.assertEqual(finish, ["tool_calls"])
        # The first delta names the call; the arguments follow in pieces, as vLLM streams them.
        self.assertTrue(deltas[0].id.startswith("call_"))
        self.assertEqual(deltas[0].function.name, "set_volume")
        self.assertEqual(deltas[0].function.arguments, "")
        self.assertTrue(all(tc.index == 0 and tc.id is None and not tc.function.name
                            for tc in deltas[1:]))
        pieces = [tc.function.arguments for tc in deltas[1:] if tc.function.arguments]
        self.assertGreater(len(pieces), 1)
        jsonschema.validate(json.loads("".join(pieces)), PARAMS["set_volume"])

if __name__ == "__main__":
    unittest.main(verbosity=2)

"""End-to-end: bad input, limits, authentication, disconnects and shutdown of the real `lucid serve`.

Every bad request must get its HTTP status and an OpenAI-style {"error": {message, type, param,
code}} body, and the server must keep serving (GET /health is 200 after each one). Model and
tokenizer as in test_serve_api.py (tiny_glm_moe_dsa + a byte-level tokenizer built on the fly;
context length 512).
Run: .venv-e2e/bin/python tests/e2e/test_serve_errors.py (ctest runs it as e2e_serve_errors).
"""

import json
import os
import signal
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lucid_server as ls  # noqa: E402

try:
    import httpx
    import openai
except ImportError as e:  # pragma: no cover
    sys.exit(f"the e2e tests need the packages of tests/e2e/requirements.txt (scripts/setup.sh "
             f"installs them into .venv-e2e): {e}")

TMP = None
MODEL_DIR = None


def setUpModule():
    global TMP, MODEL_DIR
    TMP = tempfile.TemporaryDirectory(prefix="lucid-e2e-")
    MODEL_DIR = ls.make_model_dir(TMP.name)


def tearDownModule():
    TMP.cleanup()


class ServerCase(unittest.TestCase):
    ARGS = []

    @classmethod
    def setUpClass(cls):
        cls.server = ls.LucidServer(MODEL_DIR, cls.ARGS).start()

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        if code != 0:
            raise AssertionError(f"lucid serve exited with {code}:\n{cls.server.log()[-3000:]}")

    def assertError(self, status_body, status, param=None, code=None, health=200):
        got_status, body = status_body
        self.assertEqual(got_status, status, body[:500])
        err = json.loads(body)["error"]
        self.assertEqual(set(err), {"message", "type", "param", "code"}, err)
        self.assertTrue(err["message"])
        if param is not None:
            self.assertEqual(err["param"], param, err)
        if code is not None:
            self.assertEqual(err["code"], code, err)
        self.assertEqual(ls.get(self.server.url + "/health")[0], health, "server stopped serving")
        return err


class BadInputTest(ServerCase):
    # Strict: unknown fields are a 400, as OpenAI (test_serve_agent.py checks the default).
    ARGS = ["--max-request-bytes", "64KiB", "--strict-request-fields"]

    def post(self, path, body):
        return ls.post(self.server.url + path, body)

    def test_malformed_json(self):
        self.assertError(self.post("/v1/completions", b'{"prompt": "x",'), 400, None, "invalid_json")
        self.assertError(self.post("/v1/chat/completions", b"not json"), 400, None, "invalid_json")
        self.assertError(self.post("/generate", b"[1, 2]"), 400, None, "invalid_json")

    def test_wrong_types(self):
        self.assertError(self.post("/v1/completions", {"prompt": "x", "max_tokens": "5"}), 400,
                         "max_tokens", "invalid_type")
        self.assertError(self.post("/v1/completions", {"prompt": {"a": 1}}), 400, "prompt",
                         "invalid_type")
        self.assertError(self.post("/v1/chat/completions", {"messages": "hi"}), 400, "messages",
                         "invalid_type")
        self.assertError(self.post("/v1/completions", {"prompt": "x", "stream": "yes"}), 400,
                         "stream", "invalid_type")

    def test_unknown_and_unsupported_fields(self):
        self.assertError(self.post("/v1/completions", {"prompt": "x", "foo": 1}), 400, "foo",
                         "unknown_parameter")
        self.assertError(self.post("/v1/completions", {"prompt": "x", "suffix": "tail"}), 400,
                         "suffix", "unsupported_parameter")

    def test_sampling_ranges(self):
        for body, param in [({"temperature": -0.5}, "temperature"), ({"top_p": 0}, "top_p"),
                            ({"top_p": 1.5}, "top_p"), ({"max_tokens": 0}, "max_tokens"),
                            ({"n": 0}, "n"), ({"logprobs": 50}, "logprobs")]:
            self.assertError(self.post("/v1/completions", dict(prompt="x", **body)), 400, param)

    def test_context_limits(self):
        self.assertError(self.post("/v1/completions", {"prompt": "x", "max_tokens": 100000}), 400,
                         "max_tokens", "context_length_exceeded")
        self.assertError(self.post("/v1/completions", {"prompt": [5] * 600}), 400, "prompt",
                         "context_length_exceeded")
        self.assertError(self.post("/v1/completions", {"prompt": "a" * 512}), 400, "prompt",
                         "context_length_exceeded")
        self.assertError(self.post("/generate", {"input_ids": [5] * 500,
                                                 "sampling_params": {"max_new_tokens": 100}}),
                         400, "sampling_params.max_new_tokens", "context_length_exceeded")

    def test_messages(self):
        self.assertError(self.post("/v1/chat/completions", {"messages": []}), 400, "messages",
                         "empty_array")
        self.assertError(self.post("/v1/chat/completions",
                                   {"messages": [{"role": "robot", "content": "x"}]}), 400,
                         "messages[0].role")

    def test_unknown_model_and_route(self):
        self.assertError(self.post("/v1/completions", {"model": "gpt-4o", "prompt": "x"}), 404,
                         None, "model_not_found")
        c = openai.OpenAI(base_url=self.server.url + "/v1", api_key="x", max_retries=0)
        with self.assertRaises(openai.NotFoundError) as cm:
            c.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
        self.assertEqual(cm.exception.body["code"], "model_not_found")
        with self.assertRaises(openai.BadRequestError) as cm:
            c.completions.create(model="tiny", prompt="x", temperature=-1)
        self.assertEqual(cm.exception.body["param"], "temperature")
        self.assertError(ls.get(self.server.url + "/v2/nothing"), 404)

    def test_token_ids_outside_the_vocabulary(self):
        self.assertError(self.post("/v1/completions", {"prompt": [5, 256]}), 400, "prompt",
                         "invalid_token_id")
        self.assertError(self.post("/v1/detokenize", {"tokens": [-1]}), 400, "tokens")

    def test_body_over_the_limit_is_413(self):
        big = json.dumps({"prompt": "a" * (70 * 1024)})
        self.assertError(self.post("/v1/completions", big), 413, None, "payload_too_large")

    def test_disconnect_mid_stream_frees_the_pages(self):
        before = ls.metrics(self.server.url)
        with httpx.Client(timeout=60) as h:
            with h.stream("POST", self.server.url + "/v1/completions", json={
                    "prompt": [5, 6, 7, 8], "max_tokens": 500, "temperature": 0,
                    "stream": True, "ignore_eos": True}) as r:
                self.assertEqual(r.status_code, 200)
                lines = r.iter_lines()
                for _ in range(3):
                    next(lines)
            # Leaving the block closes the connection mid-stream.
        key = 'lucid_engine_requests_total{outcome="aborted"}'
        for _ in range(200):
            m = ls.metrics(self.server.url)
            if m[key] > before[key] and m["lucid_kv_pages_used"] == 0:
                break
            time.sleep(0.05)
        self.assertEqual(m[key], before[key] + 1, "the request was not aborted")
        self.assertEqual(m["lucid_kv_pages_used"], 0)
        self.assertEqual(m["lucid_http_requests_in_flight"], 0)
        self.assertEqual(ls.get(self.server.url + "/health")[0], 200)


class AuthAndAdmissionTest(ServerCase):
    ARGS = ["--api-key", "sekret", "--max-concurrent-requests", "1"]
    AUTH = {"Authorization": "Bearer sekret"}

    def test_api_key(self):
        self.assertError(ls.get(self.server.url + "/v1/models"), 401, None, "invalid_api_key")
        self.assertError(ls.post(self.server.url + "/v1/completions", {"prompt": "x"},
                                 {"Authorization": "Bearer nope"}), 401)
        c = openai.OpenAI(base_url=self.server.url + "/v1", api_key="wrong", max_retries=0)
        with self.assertRaises(openai.AuthenticationError):
            c.models.list()
        c = openai.OpenAI(base_url=self.server.url + "/v1", api_key="sekret", max_retries=0)
        self.assertEqual(c.completions.create(model="tiny", prompt="x", max_tokens=2).object,
                         "text_completion")
        self.assertEqual(ls.get(self.server.url + "/metrics")[0], 200)  # scrapers need no key

    def test_too_many_concurrent_requests_is_429(self):
        with httpx.Client(timeout=60, headers=self.AUTH) as h:
            with h.stream("POST", self.server.url + "/v1/completions", json={
                    "prompt": [5, 6], "max_tokens": 500, "stream": True, "ignore_eos": True}) as r:
                self.assertEqual(r.status_code, 200)
                lines = r.iter_lines()  # keep it: a dropped iterator closes the connection
                next(lines)  # admitted and streaming
                self.assertError(ls.post(self.server.url + "/v1/completions",
                                         {"prompt": [5], "max_tokens": 1}, self.AUTH),
                                 429, None, "rate_limit_exceeded")
        for _ in range(200):
            status, _ = ls.post(self.server.url + "/v1/completions", {"prompt": [5], "max_tokens": 1},
                                self.AUTH)
            if status == 200:
                break
            time.sleep(0.05)
        self.assertEqual(status, 200)


class ShutdownTest(unittest.TestCase):
    def test_sigterm_finishes_in_flight_streams_cleanly(self):
        server = ls.LucidServer(MODEL_DIR, ["--shutdown-grace", "0"]).start()
        lines, errors = [], []
        started = threading.Event()

        def stream():
            try:
                with httpx.Client(timeout=60) as h, h.stream("POST", server.url + "/v1/completions", json={
                        "prompt": [5, 6], "max_tokens": 500, "stream": True, "ignore_eos": True}) as r:
                    for line in r.iter_lines():
                        started.set()
                        lines.append(line)
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e))
            started.set()

        t = threading.Thread(target=stream)
        t.start()
        self.assertTrue(started.wait(30))
        code = server.stop(signal.SIGTERM)
        t.join(60)
        self.assertFalse(t.is_alive())
        self.assertEqual(errors, [])
        self.assertEqual(code, 0, server.log()[-2000:])
        data = [x for x in lines if x.startswith("data: ")]
        self.assertEqual(data[-1], "data: [DONE]")
        last = json.loads(data[-2][6:])
        self.assertIn(last["choices"][0]["finish_reason"], ("abort", "length"))
        self.assertIn("shutting down", server.log())


class StartupErrorTest(unittest.TestCase):
    def run_serve(self, *args):
        import subprocess
        return subprocess.run([ls.BINARY, "serve", *args], capture_output=True, text=True,
                              timeout=60, env=ls.ENV)

    def test_bad_configuration_exits_2_before_loading(self):
        r = self.run_serve("--model-path", os.path.join(TMP.name, "missing"), "--port", "1")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("lucid serve:", r.stderr)
        r = self.run_serve("--model-path", MODEL_DIR, "--temperature", "1")
        self.assertEqual(r.returncode, 2, r.stderr)
        r = self.run_serve("--model-path", MODEL_DIR, "--port", "0")
        self.assertEqual(r.returncode, 2, r.stderr)
        r = self.run_serve("--model-path", MODEL_DIR, "--max-request-bytes", "lots")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--max-request-bytes", r.stderr)

    def test_malformed_model_files_exit_2_like_a_bad_configuration(self):
        # Refusals of the model directory's files exit 2 whichever step reads them (issue 26).
        import shutil
        cases = (("model.safetensors", b"\x08\x00\x00\x00\x00\x00\x00\x00{broken}"),
                 ("tokenizer.json", b"{\"model\": 3"),
                 ("config.json", b'{"model_type": "glm_moe_dsa", "dtype": "float7"}'))
        for name, content in cases:
            d = os.path.join(TMP.name, "bad-" + name)
            shutil.copytree(MODEL_DIR, d)
            with open(os.path.join(d, name), "wb") as f:
                f.write(content)
            r = self.run_serve("--model-path", d, "--port", str(ls.free_port()),
                               "--max-total-tokens", "1024")
            self.assertEqual(r.returncode, 2, f"{name}: {r.stderr[-2000:]}")
            self.assertIn("lucid serve: ", r.stderr)

    def test_port_in_use_exits_1_naming_it(self):
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            port = s.getsockname()[1]
            r = self.run_serve("--model-path", MODEL_DIR, "--port", str(port),
                               "--max-total-tokens", "1024")
        self.assertEqual(r.returncode, 1, r.stderr[-2000:])
        self.assertIn(f"cannot listen on 127.0.0.1:{port}", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)

"""End-to-end: the request surface agents and their frameworks use, against `lucid serve`.

Each test asserts the peer behaviour (vLLM / SGLang / the official `openai` client) named in its
docstring. Model and tokenizer as in test_serve_api.py (tiny_glm_moe_dsa with a byte-level
tokenizer: id = byte value), so outputs are arbitrary bytes; the tests check structure and
agreement, not prose.
Run: .venv-e2e/bin/python tests/e2e/test_serve_agent.py (ctest runs it as e2e_serve_agent).
"""

import json
import os
import sys
import tempfile
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

SERVER = None
TMP = None
ORIGIN = "http://ui.example"


def setUpModule():
    global SERVER, TMP
    TMP = tempfile.TemporaryDirectory(prefix="lucid-e2e-")
    model_dir = ls.make_model_dir(TMP.name)
    SERVER = ls.LucidServer(model_dir, ["--max-running-requests", "8",
                                        "--allowed-origins", ORIGIN]).start()


def tearDownModule():
    code = SERVER.stop() if SERVER else 0
    TMP.cleanup()
    if code != 0:
        raise AssertionError(f"lucid serve exited with {code}:\n{SERVER.log()[-3000:]}")


def client():
    return openai.OpenAI(base_url=SERVER.url + "/v1", api_key="unused", max_retries=0, timeout=120)


NO_EOS = {"ignore_eos": True}


class CompletionLogprobsTest(unittest.TestCase):
    def test_logprobs_zero_gives_the_chosen_token(self):
        """vLLM: logprobs=0 gives each top_logprobs entry as a one-entry dict, the chosen token."""
        r = client().completions.create(model="tiny", prompt="lp0", max_tokens=6, temperature=0,
                                        logprobs=0, extra_body=NO_EOS)
        lp = r.choices[0].logprobs
        self.assertEqual(len(lp.top_logprobs), 6)
        for tok, chosen, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
            self.assertEqual(top, {tok: chosen})

    def test_text_offset_counts_characters_the_same_streaming_or_not(self):
        """text_offset in characters (Python len, as vLLM and clients count), equal streaming."""
        body = {"model": "tiny", "prompt": "offsets", "max_tokens": 24, "temperature": 0,
                "logprobs": 1, "ignore_eos": True}
        status, raw = ls.post(SERVER.url + "/v1/completions", body)
        self.assertEqual(status, 200, raw)
        lp = json.loads(raw)["choices"][0]["logprobs"]
        want, at = [], 0
        for tok in lp["tokens"]:
            want.append(at)
            at += len(tok)
        self.assertEqual(lp["text_offset"], want)
        # The random model emits bytes >= 0x80 (each alone decodes to U+FFFD: three bytes, one
        # character), so a count in bytes would differ.
        self.assertTrue(any(len(t.encode()) != len(t) for t in lp["tokens"]), lp["tokens"])
        streamed = []
        with httpx.Client(timeout=120) as h, h.stream("POST", SERVER.url + "/v1/completions",
                                                      json=dict(body, stream=True)) as r:
            for line in r.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    ch = json.loads(line[6:])["choices"][0]
                    if ch["logprobs"]:
                        streamed += ch["logprobs"]["text_offset"]
        self.assertEqual(streamed, want)


class PromptLogprobsTest(unittest.TestCase):
    def test_echo_with_logprobs_scores_the_prompt(self):
        """vLLM: echo + logprobs returns the prompt tokens' logprobs first (the first null); the
        logprob of a prompt token is what the same context gives a generated token."""
        prompt = [70, 71, 72, 73, 74, 75]
        status, body = ls.post(SERVER.url + "/v1/completions", {
            "prompt": prompt, "max_tokens": 1, "temperature": 0, "ignore_eos": True,
            "logprobs": 2, "return_token_ids": True})
        self.assertEqual(status, 200, body)
        first = json.loads(body)["choices"][0]
        t0, lp0 = first["token_ids"][0], first["logprobs"]["token_logprobs"][0]
        r = client().completions.create(model="tiny", prompt=prompt + [t0], max_tokens=2,
                                        temperature=0, echo=True, logprobs=2, extra_body=NO_EOS)
        lp = r.choices[0].logprobs
        self.assertEqual(len(lp.tokens), len(prompt) + 1 + 2)
        self.assertIsNone(lp.token_logprobs[0])
        self.assertIsNone(lp.top_logprobs[0])
        self.assertTrue(all(x <= 0 for x in lp.token_logprobs[1:]))
        self.assertAlmostEqual(lp.token_logprobs[len(prompt)], lp0, places=3)
        at, want = 0, []
        for tok in lp.tokens:
            want.append(at)
            at += len(tok)
        self.assertEqual(lp.text_offset, want)
        # SGLang's /generate: input_token_logprobs from logprob_start_len, the same numbers.
        status, body = ls.post(SERVER.url + "/generate", {
            "input_ids": prompt + [t0], "return_logprob": True, "logprob_start_len": 2,
            "top_logprobs_num": 1, "sampling_params": {"max_new_tokens": 1, "temperature": 0}})
        self.assertEqual(status, 200, body)
        meta = json.loads(body)["meta_info"]
        got = meta["input_token_logprobs"]
        self.assertEqual([g[1] for g in got], (prompt + [t0])[2:])
        for g, want_lp in zip(got, lp.token_logprobs[2:len(prompt) + 1]):
            self.assertAlmostEqual(g[0], want_lp, places=3)
        self.assertEqual(len(meta["input_top_logprobs"][0]), 1)


    def test_streamed_echo_with_logprobs_matches_the_non_streaming_answer(self):
        """vLLM streams echo + logprobs too: the first chunk is the prompt with its logprobs;
        assembled, the stream gives the non-streaming text and logprobs."""
        body = {"model": "tiny", "prompt": "Score this prompt", "max_tokens": 6, "temperature": 0,
                "echo": True, "logprobs": 2, "ignore_eos": True}
        status, raw = ls.post(SERVER.url + "/v1/completions", body)
        self.assertEqual(status, 200, raw)
        want = json.loads(raw)["choices"][0]
        text, lps, first = "", {"tokens": [], "token_logprobs": [], "top_logprobs": [],
                                "text_offset": []}, None
        with httpx.Client(timeout=120) as h, h.stream("POST", SERVER.url + "/v1/completions",
                                                      json=dict(body, stream=True)) as r:
            self.assertEqual(r.status_code, 200)
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                ch = json.loads(line[6:])["choices"][0]
                if first is None:
                    first = ch
                text += ch["text"]
                for k in lps:
                    lps[k] += (ch["logprobs"] or {}).get(k, [])
        self.assertEqual(first["text"], "Score this prompt")
        self.assertIsNone(first["logprobs"]["token_logprobs"][0])
        self.assertEqual(text, want["text"])
        self.assertEqual(lps["tokens"], want["logprobs"]["tokens"])
        self.assertEqual(lps["text_offset"], want["logprobs"]["text_offset"])
        self.assertIsNone(lps["token_logprobs"][0])
        for got, exp in zip(lps["token_logprobs"][1:], want["logprobs"]["token_logprobs"][1:]):
            self.assertAlmostEqual(got, exp, places=4)
        self.assertEqual(lps["top_logprobs"][0], None)
        for got, exp in zip(lps["top_logprobs"][1:], want["logprobs"]["top_logprobs"][1:]):
            self.assertEqual(set(got), set(exp))


class LenientFieldsTest(unittest.TestCase):
    def test_unknown_fields_are_accepted_and_named(self):
        """vLLM / SGLang accept unknown fields (LangChain, LiteLLM send them); lucid names them in
        the X-Lucid-Ignored-Fields header and the log."""
        c = client()
        raw = c.chat.completions.with_raw_response.create(
            model="tiny", messages=[{"role": "user", "content": "x"}], max_tokens=2,
            extra_body={"langchain_run_id": "r1", "litellm_metadata": {"a": 1}})
        self.assertEqual(raw.http_response.status_code, 200)
        self.assertEqual(raw.headers["x-lucid-ignored-fields"], "langchain_run_id, litellm_metadata")
        self.assertEqual(raw.parse().object, "chat.completion")
        self.assertIn("ignored unknown request fields: langchain_run_id, litellm_metadata",
                      SERVER.log())

    def test_non_streaming_disconnect_aborts_and_frees_pages(self):
        """vLLM aborts a non-streaming request whose client disconnects, freeing its pages."""
        key = 'lucid_engine_requests_total{outcome="aborted"}'
        before = ls.metrics(SERVER.url)
        # 16 prompts x 500 tokens: far longer than the client waits.
        with self.assertRaises(httpx.TimeoutException):
            httpx.post(SERVER.url + "/v1/completions", timeout=0.3, json={
                "prompt": [[5, 6, 7 + i] for i in range(16)], "max_tokens": 500,
                "ignore_eos": True})
        for _ in range(200):
            m = ls.metrics(SERVER.url)
            if m[key] > before[key] and m["lucid_kv_pages_used"] == 0:
                break
            time.sleep(0.05)
        self.assertGreater(m[key], before[key], "the requests were not aborted")
        self.assertEqual(m["lucid_kv_pages_used"], 0)
        self.assertEqual(m["lucid_http_requests_in_flight"], 0)


class RequestSurfaceTest(unittest.TestCase):
    def greedy(self, prompt, n, **extra):
        status, body = ls.post(SERVER.url + "/v1/completions", dict(
            {"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True}, **extra))
        self.assertEqual(status, 200, body)
        return json.loads(body)["choices"][0]

    def test_logit_bias_forces_and_bans_tokens(self):
        """OpenAI / vLLM logit_bias: +100 makes a token certain, -100 removes it."""
        forced = self.greedy([5, 6, 7], 6, logit_bias={"65": 100}, return_token_ids=True)
        self.assertEqual(forced["token_ids"], [65] * 6)
        self.assertEqual(forced["text"], "A" * 6)
        plain = self.greedy([5, 6, 7], 6, return_token_ids=True)["token_ids"]
        banned = self.greedy([5, 6, 7], 6, return_token_ids=True,
                             logit_bias={str(plain[0]): -100})["token_ids"]
        self.assertNotIn(plain[0], banned)
        # Sampled, too (the openai client's own logit_bias parameter).
        r = client().completions.create(model="tiny", prompt="lb", max_tokens=8, temperature=1.0,
                                        seed=3, logit_bias={"66": 100}, extra_body=NO_EOS)
        self.assertEqual(r.choices[0].text, "B" * 8)

    def test_min_tokens_holds_back_the_stop_ids(self):
        """vLLM min_tokens: EOS and stop_token_ids are not sampled before min_tokens tokens."""
        first = self.greedy([9, 8, 7], 1, return_token_ids=True)["token_ids"][0]
        stopped = self.greedy([9, 8, 7], 10, stop_token_ids=[first], return_token_ids=True)
        self.assertEqual(stopped["token_ids"], [first])
        self.assertEqual(stopped["finish_reason"], "stop")
        held = self.greedy([9, 8, 7], 10, stop_token_ids=[first], min_tokens=4,
                           return_token_ids=True)
        self.assertGreaterEqual(len(held["token_ids"]), 4)
        self.assertNotIn(first, held["token_ids"][:4])

    def test_include_stop_str_in_output(self):
        """vLLM include_stop_str_in_output: the text ends with the matched stop string."""
        full = self.greedy("stop str", 24)["text"]
        k = next((i for i in range(3, len(full) - 1) if "\ufffd" not in full[i:i + 2]), None)
        self.assertIsNotNone(k, repr(full))
        stop = full[k:k + 2]
        cut = self.greedy("stop str", 24, stop=[stop])
        kept = self.greedy("stop str", 24, stop=[stop], include_stop_str_in_output=True)
        self.assertEqual(kept["text"], cut["text"] + stop)
        self.assertEqual(kept["finish_reason"], "stop")

    def test_return_token_ids_and_truncate_prompt_tokens(self):
        """vLLM return_token_ids (token_ids, prompt_token_ids) and truncate_prompt_tokens (keep
        the last k prompt tokens)."""
        prompt = list(range(40, 60))
        r = self.greedy(prompt, 4, return_token_ids=True, truncate_prompt_tokens=5)
        self.assertEqual(r["prompt_token_ids"], prompt[-5:])
        status, body = ls.post(SERVER.url + "/generate", {"input_ids": prompt[-5:],
                               "sampling_params": {"max_new_tokens": 4, "temperature": 0,
                                                   "ignore_eos": True}})
        self.assertEqual(r["token_ids"], json.loads(body)["output_ids"])
        chat = client().chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hey"}], max_tokens=2,
            extra_body={"return_token_ids": True})
        rendered = "<|user|>hey\n<|assistant|>"
        self.assertEqual(chat.model_extra["prompt_token_ids"], list(rendered.encode()))

    def test_priority_other_than_zero_is_a_clear_400(self):
        """vLLM without priority scheduling: 400 for priority != 0; 0 is accepted."""
        self.greedy([5], 1, priority=0)
        status, body = ls.post(SERVER.url + "/v1/completions", {"prompt": [5], "priority": 3})
        self.assertEqual(status, 400)
        err = json.loads(body)["error"]
        self.assertEqual(err["param"], "priority")
        self.assertIn("first come, first served", err["message"])

    def test_continuous_usage_stats(self):
        """vLLM stream_options.continuous_usage_stats: usage on every chunk."""
        chunks = list(client().chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "u"}], max_tokens=5,
            stream=True, extra_body={"ignore_eos": True,
                                     "stream_options": {"include_usage": True,
                                                        "continuous_usage_stats": True}}))
        self.assertTrue(all(ch.usage is not None for ch in chunks), chunks)
        counts = [ch.usage.completion_tokens for ch in chunks if ch.choices]
        self.assertEqual(counts, sorted(counts))
        self.assertEqual(chunks[-1].usage.completion_tokens, 5)


class PeerRoutesTest(unittest.TestCase):
    def test_sglang_and_vllm_routes(self):
        """SGLang's /get_server_info; vLLM's /version, /ping, /tokenize and /detokenize."""
        status, body = ls.get(SERVER.url + "/get_server_info")
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["model"]["name"], "tiny")
        status, body = ls.get(SERVER.url + "/version")
        self.assertEqual(status, 200)
        self.assertIsInstance(json.loads(body)["version"], str)
        self.assertEqual(ls.get(SERVER.url + "/ping")[0], 200)
        self.assertEqual(ls.post(SERVER.url + "/ping", b"")[0], 200)
        status, body = ls.post(SERVER.url + "/tokenize", {"model": "tiny", "prompt": "Hi"})
        self.assertEqual(status, 200, body)
        tok = json.loads(body)
        self.assertEqual(tok["tokens"], [72, 105])
        self.assertEqual(tok["count"], 2)
        status, body = ls.post(SERVER.url + "/detokenize", {"model": "tiny", "tokens": [72, 105]})
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["prompt"], "Hi")

    def test_cors_preflight_and_headers(self):
        """CORS as vLLM's --allowed-origins: preflight OPTIONS answered, origin echoed."""
        r = httpx.options(SERVER.url + "/v1/chat/completions", headers={
            "Origin": ORIGIN, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type"})
        self.assertIn(r.status_code, (200, 204))
        self.assertEqual(r.headers["access-control-allow-origin"], ORIGIN)
        self.assertIn("POST", r.headers["access-control-allow-methods"])
        self.assertIn("content-type", r.headers["access-control-allow-headers"].lower())
        r = httpx.get(SERVER.url + "/v1/models", headers={"Origin": ORIGIN})
        self.assertEqual(r.headers["access-control-allow-origin"], ORIGIN)
        r = httpx.get(SERVER.url + "/v1/models", headers={"Origin": "http://other.example"})
        self.assertNotIn("access-control-allow-origin", r.headers)

    def test_metrics_under_vllm_and_sglang_names(self):
        """The families Grafana dashboards for vLLM and SGLang query, with model_name."""
        client().completions.create(model="tiny", prompt="m", max_tokens=3, extra_body=NO_EOS)
        m = ls.metrics(SERVER.url)
        label = '{model_name="tiny"}'
        for name in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                     "vllm:kv_cache_usage_perc", "vllm:prompt_tokens_total",
                     "vllm:generation_tokens_total", "vllm:time_to_first_token_seconds_count",
                     "vllm:e2e_request_latency_seconds_count", "sglang:num_running_reqs",
                     "sglang:num_queue_reqs", "sglang:token_usage", "sglang:generation_tokens_total",
                     "sglang:time_to_first_token_seconds_count"):
            self.assertIn(name + label, m, name)
        self.assertEqual(m["vllm:generation_tokens_total" + label], m["lucid_generation_tokens_total"])
        self.assertEqual(m["sglang:prompt_tokens_total" + label], m["lucid_prompt_tokens_total"])
        self.assertGreaterEqual(m["vllm:e2e_request_latency_seconds_count" + label], 1)


if __name__ == "__main__":
    unittest.main()

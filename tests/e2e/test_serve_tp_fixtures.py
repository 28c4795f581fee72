"""End-to-end: two-rank servers on the tiny GLM-5 (glm_moe_dsa) and DeepSeek-V3.2 fixtures, driven
by the official `openai` client, against a single-process server of the same fixture (both on the
reference kernels). test_serve_tp.py runs the whole client suite on tiny DeepSeek-V3; this file
covers the two DSA fixtures (the lightning indexer runs on every rank) with a short list, for each
layout: TP 2, TP 2 + EP 2, and DP-attention 2 + EP 2.

For each fixture and layout, every answer equals the single-process server's:
- chat completion, greedy, with logprobs (tokens and values within 1e-4);
- a streamed completion (the concatenated deltas, and the finish reason);
- four concurrent completions of different lengths (batched steps; under DP attention both KV
  partitions are in use).
The servers stop on SIGTERM to rank 0 with every rank exiting 0.
Run: .venv-e2e/bin/python tests/e2e/test_serve_tp_fixtures.py (ctest: mpi/e2e_serve_tp_fixtures).
"""

import concurrent.futures
import os
import signal
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lucid_server as ls  # noqa: E402
import openai  # noqa: E402

ARGS = ["--max-running-requests", "8", "--cpu-kernels", "reference"]
LAYOUTS = {
    "tp2": [],
    "tp2_ep2": ["--ep-size", "2"],
    "dp2_ep2": ["--ep-size", "2", "--enable-dp-attention", "--dp-size", "2"],
}
PROMPTS = ["Sparse attention", "zz" * 30, "The indexer picks", "a b c d e f g h i j k"]


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0,
                         timeout=120)


def chat(server):
    r = client(server).chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Which tokens matter?"}],
        max_tokens=10, temperature=0, logprobs=True, top_logprobs=2,
        extra_body={"ignore_eos": True})
    c = r.choices[0]
    return c.message.content, [(t.token, t.logprob) for t in c.logprobs.content]


def stream(server, prompt):
    parts, finish = [], None
    for chunk in client(server).completions.create(model="tiny", prompt=prompt, max_tokens=12,
                                                   temperature=0, stream=True,
                                                   extra_body={"ignore_eos": True}):
        parts.append(chunk.choices[0].text)
        finish = chunk.choices[0].finish_reason or finish
    return "".join(parts), finish


def complete(server, prompt, n):
    r = client(server).completions.create(model="tiny", prompt=prompt, max_tokens=n,
                                          temperature=0, extra_body={"ignore_eos": True})
    return r.choices[0].text


class FixtureLayoutsTest(unittest.TestCase):
    def check_fixture(self, fixture):
        with tempfile.TemporaryDirectory(prefix="lucid-e2e-tpfix-") as tmp:
            model_dir = ls.make_model_dir(tmp, fixture)
            with ls.LucidServer(model_dir, ARGS) as single:
                want_chat = chat(single)
                want_stream = [stream(single, p) for p in PROMPTS[:2]]
                want_batch = [complete(single, p, 6 + 2 * i) for i, p in enumerate(PROMPTS)]
                for name, extra in LAYOUTS.items():
                    with self.subTest(fixture=fixture, layout=name):
                        server = ls.TpLucidServer(model_dir, ARGS + extra)
                        server.log_path = os.path.join(tmp, name)
                        server.start()
                        try:
                            self.check_server(server, want_chat, want_stream, want_batch)
                        finally:
                            code = server.stop(signal.SIGTERM)
                        self.assertEqual(code, 0, server.log()[-3000:])
                        self.assertEqual(server.rank_exit_codes(), {0: 0, 1: 0},
                                         server.log()[-3000:])
                        server.remove_stdout_files()

    def check_server(self, server, want_chat, want_stream, want_batch):
        text, lps = chat(server)
        self.assertEqual(text, want_chat[0])
        self.assertEqual([t for t, _ in lps], [t for t, _ in want_chat[1]])
        for (_, a), (_, b) in zip(lps, want_chat[1]):
            self.assertAlmostEqual(a, b, delta=1e-4)
        self.assertEqual([stream(server, p) for p in PROMPTS[:2]], want_stream)
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda ip: complete(server, ip[1], 6 + 2 * ip[0]),
                                enumerate(PROMPTS)))
        self.assertEqual(got, want_batch)

    def test_glm5_dsa_fixture(self):
        self.check_fixture("tiny_glm_moe_dsa")

    def test_deepseek_v32_fixture(self):
        self.check_fixture("tiny_deepseek_v32")


if __name__ == "__main__":
    unittest.main(verbosity=2)

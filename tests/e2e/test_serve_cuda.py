"""End-to-end on a GPU: `lucid serve --device cuda` on the three tiny fixtures, driven by the
official `openai` client and the native /generate route.

The three servers run cuda-reference (--dtype float32: exact f32; no CUDA graphs on this
machine's GPU), so the oracles are:
  - `lucid generate --device cuda` (one sequence, no server) through the same kernels: equal
    greedy tokens for a request alone;
  - the same request alone, for each of 8 sent at once, and `lucid generate --cpu-kernels
    reference` on the CPU: equal greedy tokens up to the first step whose top-2 logprob margin
    is under NEAR_TIE (cuBLAS may choose another algorithm for another batch size, and the CPU
    sums in another order: f32 results differ by ~1e-5 here; past a near tie the continuations
    may part and are not compared).
Without a CUDA device, or in a build without the CUDA backend, it prints why and exits 77, which
ctest reports as skipped. scripts/cuda_check.sh runs it on a GPU machine; the plan is for this
machine's GPU (--target local: the device the CUDA runtime reports, its free memory, no graphs by
rule), and each of the three servers, which share the GPU, holds a small KV pool. A fourth server
runs tiny_glm_moe_dsa in bfloat16 (cuda-bf16act, what its checkpoint's dtype chooses): its greedy
tokens for a request alone equal `lucid generate --device cuda --dtype bfloat16`'s (the CPU's
fast-bf16act is compared at the logits in backends/cuda/cuda_model_test.cpp).
The GPU commands pass the self-test gate (cli/kernel_gate.h) with the binary's record for this
device (scripts/cuda_check.sh makes it first with `lucid backends --self-test`; without one the
first start measures it); LUCID_E2E_GPU_EXTRA_FLAGS adds flags to them (cuda_check.sh passes
--allow-unverified-kernels there when the self-test found a failing kernel, to measure the rest).
Run: .venv-e2e/bin/python tests/e2e/test_serve_cuda.py (ctest runs it as e2e_serve_cuda).
"""

import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lucid_server as ls  # noqa: E402

try:
    import openai
except ImportError as e:  # pragma: no cover
    sys.exit(f"the e2e tests need the packages of tests/e2e/requirements.txt (scripts/setup.sh "
             f"installs them into .venv-e2e): {e}")

FIXTURES = ("tiny_glm_moe_dsa", "tiny_deepseek_v32", "tiny_deepseek_v3")
GPU_EXTRA_FLAGS = os.environ.get("LUCID_E2E_GPU_EXTRA_FLAGS", "").split()
GPU_FLAGS = ["--device", "cuda", "--dtype", "float32"] + GPU_EXTRA_FLAGS
BF16_FLAGS = ["--device", "cuda", "--dtype", "bfloat16"] + GPU_EXTRA_FLAGS
BF16_SERVER = []  # the cuda-bf16act server (one)
SERVER_KV_TOKENS = "65536"  # of the GPU's free memory each server would otherwise plan for
NEAR_TIE = 1e-3
PROMPT = [3, 14, 15, 92, 65, 35]
NEW_TOKENS = 12
SERVERS = {}  # fixture -> LucidServer
MODEL_DIRS = {}
TMP = None


def generate(model_dir, prompt, n, device_flags):
    """`lucid generate` token ids; (None, stderr) when it fails."""
    out = subprocess.run([ls.BINARY, "generate", "--model-path", model_dir, "--prompt-ids",
                          ",".join(map(str, prompt)), "--max-new-tokens", str(n), "--output",
                          "json"] + device_flags, capture_output=True, text=True, timeout=120,
                         env=ls.ENV)
    if out.returncode != 0:
        return None, out.stderr
    return json.loads(out.stdout)["token_ids"], out.stderr


def skip_without_a_gpu():
    ids, err = generate(os.path.join(ls.SOURCE_DIR, "tests", "fixtures", "models", FIXTURES[0]),
                        PROMPT, 1, GPU_FLAGS)
    if ids is None and ("no CUDA device" in err or "this build has no CUDA backend" in err):
        print(f"skipped: `lucid generate --device cuda` says: {err.strip()}")
        sys.exit(77)
    assert ids is not None, err


def setUpModule():
    global TMP
    TMP = tempfile.TemporaryDirectory(prefix="lucid-e2e-cuda-")
    for fixture in FIXTURES:
        MODEL_DIRS[fixture] = ls.make_model_dir(TMP.name, fixture)
        SERVERS[fixture] = ls.LucidServer(MODEL_DIRS[fixture],
                                          GPU_FLAGS + ["--max-running-requests", "8",
                                                       "--max-total-tokens", SERVER_KV_TOKENS]
                                          ).start()
    BF16_SERVER.append(ls.LucidServer(MODEL_DIRS[FIXTURES[0]],
                                      BF16_FLAGS + ["--max-running-requests", "8",
                                                    "--max-total-tokens", SERVER_KV_TOKENS]
                                      ).start())


def tearDownModule():
    failures = []
    for fixture, server in list(SERVERS.items()) + [("bf16 " + FIXTURES[0], s)
                                                     for s in BF16_SERVER]:
        code = server.stop()
        if code != 0:
            failures.append(f"{fixture}: lucid serve exited with {code}:\n{server.log()[-3000:]}")
    if TMP is not None:
        TMP.cleanup()
    if failures:
        raise AssertionError("\n".join(failures))


def native_generate(server, prompt, n, top=0):
    body = {"input_ids": prompt,
            "sampling_params": {"max_new_tokens": n, "temperature": 0, "ignore_eos": True}}
    if top:
        body.update({"return_logprob": True, "top_logprobs_num": top})
    status, text = ls.post(server.url + "/generate", body)
    assert status == 200, text
    return json.loads(text)


class CudaServeTest(unittest.TestCase):
    def test_server_info_and_log_name_the_gpu_backend(self):
        for fixture, server in SERVERS.items():
            status, body = ls.get(server.url + "/server_info")
            self.assertEqual(status, 200, body)
            info = json.loads(body)
            settings = info["config"]["settings"]
            # The plan's weights and KV pool against what CudaAllocator holds, to the byte.
            memory = info["memory"]
            self.assertEqual(memory["device"], "cuda", fixture)
            self.assertEqual(memory["weights_held_bytes"], memory["weights_planned_bytes"], memory)
            self.assertEqual(memory["kv_pool_held_bytes"], memory["kv_pool_planned_bytes"], memory)
            self.assertIn("memory on cuda: weights ", server.log(), fixture)
            print(f"[ cuda ] serve {fixture}: weights {memory['weights_held_bytes']} B, KV pool "
                  f"{memory['kv_pool_held_bytes']} B held on the GPU, as planned", file=sys.stderr)
            self.assertEqual(settings["device"]["value"], "cuda", fixture)
            self.assertEqual(settings["dtype"]["value"], "float32", fixture)
            self.assertIn("backend: cuda-reference on ", server.log(), fixture)
            self.assertIn("kernels: cuda-reference\n", server.log(), fixture)

    def test_bf16_server_runs_cuda_bf16act_and_equals_lucid_generate(self):
        server = BF16_SERVER[0]
        status, body = ls.get(server.url + "/server_info")
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["config"]["settings"]["dtype"]["value"], "bfloat16")
        self.assertIn("backend: cuda-bf16act on ", server.log())
        self.assertIn("kernels: cuda-bf16act\n", server.log())
        want, err = generate(MODEL_DIRS[FIXTURES[0]], PROMPT, NEW_TOKENS, BF16_FLAGS)
        self.assertIsNotNone(want, err)
        self.assertEqual(native_generate(server, PROMPT, NEW_TOKENS)["output_ids"], want)
        print(f"[ cuda ] serve {FIXTURES[0]} bf16: {NEW_TOKENS} greedy tokens equal lucid "
              f"generate's on cuda-bf16act", file=sys.stderr)

    def test_greedy_tokens_equal_lucid_generate_on_the_gpu(self):
        for fixture, server in SERVERS.items():
            want, err = generate(MODEL_DIRS[fixture], PROMPT, NEW_TOKENS, GPU_FLAGS)
            self.assertIsNotNone(want, err)
            got = native_generate(server, PROMPT, NEW_TOKENS)["output_ids"]
            self.assertEqual(got, want, fixture)

    def assertEqualUntilANearTie(self, got, want, tops, what):
        """`got` equals `want` (token ids) up to the first step whose top-2 margin in `tops`
        (output_top_logprobs of `got`'s request) is under NEAR_TIE; returns how many compared."""
        compared = 0
        for step, (g, w, alts) in enumerate(zip(got, want, tops)):
            if alts[0][0] - alts[1][0] < NEAR_TIE:
                break
            self.assertEqual(g, w, f"{what} step {step}: {got} against {want}")
            compared += 1
        self.assertGreater(compared, 0, f"{what}: a near tie at the first token: {tops[0]}")
        return compared

    def test_greedy_tokens_agree_with_the_cpu_reference_until_a_near_tie(self):
        for fixture, server in SERVERS.items():
            cpu, err = generate(MODEL_DIRS[fixture], PROMPT, NEW_TOKENS,
                                ["--device", "cpu", "--cpu-kernels", "reference"])
            self.assertIsNotNone(cpu, err)
            r = native_generate(server, PROMPT, NEW_TOKENS, top=2)
            compared = self.assertEqualUntilANearTie(
                r["output_ids"], cpu, r["meta_info"]["output_top_logprobs"], fixture)
            print(f"[ cuda ] serve {fixture}: {compared} of {NEW_TOKENS} greedy tokens equal the "
                  f"CPU reference's before a near tie", file=sys.stderr)

    def test_eight_at_once_each_agree_with_alone_until_a_near_tie(self):
        server = SERVERS[FIXTURES[0]]
        prompts = [[(7 * k + 11 * i) % 251 + 3 for k in range(5 + 9 * i)] for i in range(8)]
        alone = [native_generate(server, p, 8, top=2) for p in prompts]
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            together = list(pool.map(lambda p: native_generate(server, p, 8)["output_ids"],
                                     prompts))
        for i, (got, a) in enumerate(zip(together, alone)):
            self.assertEqual(len(got), 8)
            self.assertEqualUntilANearTie(got, a["output_ids"],
                                          a["meta_info"]["output_top_logprobs"], f"request {i}")

    def test_openai_client_completion_stream_and_chat(self):
        server = SERVERS[FIXTURES[0]]
        c = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0,
                          timeout=120)
        r = c.completions.create(model="tiny", prompt="Hello", max_tokens=8, temperature=0,
                                 extra_body={"ignore_eos": True})
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.usage.prompt_tokens, 5)
        self.assertEqual(r.usage.completion_tokens, 8)
        chunks = list(c.completions.create(model="tiny", prompt="Hello", max_tokens=8,
                                           temperature=0, stream=True,
                                           extra_body={"ignore_eos": True}))
        self.assertEqual("".join(ch.choices[0].text for ch in chunks if ch.choices),
                         r.choices[0].text)
        chat = c.chat.completions.create(model="tiny", messages=[{"role": "user",
                                                                  "content": "Hi"}],
                                         max_tokens=4, temperature=0,
                                         extra_body={"ignore_eos": True})
        self.assertEqual(chat.choices[0].message.role, "assistant")
        self.assertEqual(chat.usage.completion_tokens, 4)


if __name__ == "__main__":
    skip_without_a_gpu()
    unittest.main(verbosity=2)

"""End-to-end: a tensor-parallel server, `mpirun -np 2 lucid serve --tp-size 2` (rank 0 runs the
HTTP server, tokenizer and scheduler; rank 1 runs its shard of every step), driven by the official
`openai` client, on the tiny DeepSeek-V3 fixture (tests/fixtures/models/tiny_deepseek_v3 with the
byte-level tokenizer of lucid_server.make_model_dir), both ranks on the reference kernels.

- test_serve_api's client tests run against the two-rank server (TpOpenAIClientTest,
  TpConcurrencyTest): every test of OpenAIClientTest and ConcurrencyTest but three, skipped below
  with the reason (two are about the fast kernels, which this file's servers do not run; one
  trips on this fixture's output bytes, on one process too). test_completion_matches_lucid_generate
  compares with the single-process `lucid generate` on the reference kernels, as do the
  concurrent-streams test (8 of its 32 requests here) and the prefix-cache test.
- The greedy output (ids, text, logprobs) equals a single-process server's on the same fixture
  with the reference kernels, for TP 2, for TP 2 + EP 2 and for DP-attention 2 + EP 2.
- Start-up says the world (a line per rank), neither rank writes on stdout, and SIGTERM to
  rank 0 stops both ranks, each exiting 0.
- --tp-size 2 without mpirun, and two ranks with --tp-size 1, are refused (exit 2).
Run: .venv-e2e/bin/python tests/e2e/test_serve_tp.py (ctest: mpi/e2e_serve_tp).
"""

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lucid_server as ls  # noqa: E402
import test_serve_api as api  # noqa: E402

TP = None  # mpirun -np 2 ... --tp-size 2
SINGLE = None  # one process, the same flags
TMP = None
ARGS = ["--max-running-requests", "32", "--cpu-kernels", "reference"]


def setUpModule():
    global TP, SINGLE, TMP
    TMP = tempfile.TemporaryDirectory(prefix="lucid-e2e-tp-")
    model_dir = ls.make_model_dir(TMP.name, "tiny_deepseek_v3")
    TP = ls.TpLucidServer(model_dir, ARGS).start()
    SINGLE = ls.LucidServer(model_dir, ARGS).start()
    # test_serve_api's tests read these module globals.
    api.SERVER = api.REF_SERVER = TP
    api.MODEL_DIR = model_dir


def tearDownModule():
    failures = []
    for server in (TP, SINGLE):
        if server is None:
            continue
        code = server.stop(signal.SIGTERM)
        if code != 0:
            failures.append(f"lucid serve exited with {code}:\n{server.log()[-3000:]}")
    # SIGTERM to rank 0: it stops the worker, and every rank exits 0.
    if TP is not None and TP.rank_exit_codes() != {0: 0, 1: 0}:
        failures.append(f"ranks exited with {TP.rank_exit_codes()}:\n{TP.log()[-3000:]}")
    if TP is not None and (TP.rank_stdout(0) or TP.rank_stdout(1)):  # logs go to stderr
        failures.append(f"stdout: {TP.rank_stdout(0)[:500]!r}, {TP.rank_stdout(1)[:500]!r}")
    if TP is not None and "the worker ranks stopped" not in TP.log():
        failures.append("rank 0 did not say the workers stopped:\n" + TP.log()[-3000:])
    if TP is not None:
        TP.remove_stdout_files()
    TMP.cleanup()
    if failures:
        raise AssertionError("\n".join(failures))


class TpOpenAIClientTest(api.OpenAIClientTest):
    def test_completion_matches_lucid_generate(self):
        # The reference kernels on both sides (test_serve_api compares its fast server with the
        # fast kernels); the prompts are those of test_serve_api.
        for prompt in ([5, 6, 7, 8, 9], [(13 * k + 7) % 251 + 3 for k in range(200)]):
            want = ls.reference_greedy(api.MODEL_DIR, prompt, 12, cpu_kernels="reference")
            status, body = ls.post(TP.url + "/generate", {
                "input_ids": prompt, "sampling_params": {"max_new_tokens": 12, "temperature": 0,
                                                         "ignore_eos": True}})
            self.assertEqual(status, 200, body)
            self.assertEqual(json.loads(body)["output_ids"], want, f"prompt of {len(prompt)}")

    @unittest.skip("about the default kernel rule on GLM-5's bf16 fixture; see test_server_info")
    def test_server_info_reports_the_cpu_kernels(self):
        pass

    @unittest.skip("this fixture's 5th token is the first byte of an unfinished UTF-8 character, "
                   "which the text holds back (one process too); the logprobs are compared with "
                   "the single-process server's in TpMatchesOneProcessTest")
    def test_logprobs(self):
        pass


class TpConcurrencyTest(api.ConcurrencyTest):
    # The first 8 of test_serve_api's 32 concurrent requests (the 32 take ~35 s on two ranks on
    # 2 busy cores; TpMatchesOneProcessTest batches 8 more against the single-process server).
    REQS = api.ConcurrencyTest.REQS[:8]

    @unittest.skip("the fast kernels: both servers of this file run the reference kernels")
    def test_32_concurrent_streams_on_the_fast_kernels_complete_and_free_their_pages(self):
        pass


def generate(server, prompt, n, logprobs=False):
    status, body = ls.post(server.url + "/generate", {
        "input_ids": prompt, "return_logprob": logprobs,
        "sampling_params": {"max_new_tokens": n, "temperature": 0, "ignore_eos": True}})
    assert status == 200, body
    return json.loads(body)


def complete(server, prompt, n):
    status, body = ls.post(server.url + "/v1/completions", {
        "prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True, "logprobs": 2})
    assert status == 200, body
    return json.loads(body)["choices"][0]


PROMPTS = [[3, 1, 4, 1, 5, 9, 2, 6], [(29 * k + 11) % 250 + 2 for k in range(150)]]


class TpMatchesOneProcessTest(unittest.TestCase):
    def check_same(self, server):
        for prompt in PROMPTS:
            got, want = generate(server, prompt, 16, True), generate(SINGLE, prompt, 16, True)
            self.assertEqual(got["output_ids"], want["output_ids"], f"prompt of {len(prompt)}")
            got_lp = [t[0] for t in got["meta_info"]["output_token_logprobs"]]
            want_lp = [t[0] for t in want["meta_info"]["output_token_logprobs"]]
            for a, b in zip(got_lp, want_lp):
                self.assertAlmostEqual(a, b, delta=1e-4)
        for text in ("Tensor parallel", "zz" * 40):
            got, want = complete(server, text, 12), complete(SINGLE, text, 12)
            self.assertEqual(got["text"], want["text"], text)
            self.assertEqual(got["logprobs"]["tokens"], want["logprobs"]["tokens"])

    def test_greedy_output_equals_the_single_process_server(self):
        self.check_same(TP)

    def test_batched_greedy_output_equals_the_single_process_server(self):
        # Eight requests at once on each server (reference kernels: a row does not depend on
        # its batch), each against the single-process server's output of the same request.
        prompts = [[(7 * i + 5 * k) % 250 + 2 for k in range(3 + 5 * i)] for i in range(8)]
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda p: generate(TP, p, 10)["output_ids"], prompts))
            want = list(pool.map(lambda p: generate(SINGLE, p, 10)["output_ids"], prompts))
        self.assertEqual(got, want)

    def test_expert_parallel_greedy_output_equals_the_single_process_server(self):
        with ls.TpLucidServer(api.MODEL_DIR, ARGS + ["--ep-size", "2"]) as ep:
            self.check_same(ep)
            self.assertIn("tp 2, ep 2", ep.log())
        self.assertEqual(ep.returncode, 0, ep.log()[-3000:])
        self.assertEqual(ep.rank_exit_codes(), {0: 0, 1: 0}, ep.log()[-3000:])
        ep.remove_stdout_files()

    def test_data_parallel_attention_greedy_output_equals_the_single_process_server(self):
        # DP-attention 2 + EP 2: each rank holds the KV of the requests admitted to its partition
        # and runs their attention; eight requests at once use both partitions.
        args = ARGS + ["--ep-size", "2", "--enable-dp-attention", "--dp-size", "2"]
        with ls.TpLucidServer(api.MODEL_DIR, args) as dp:
            self.check_same(dp)
            prompts = [[(11 * i + 3 * k) % 250 + 2 for k in range(4 + 7 * i)] for i in range(8)]
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                got = list(pool.map(lambda p: generate(dp, p, 10)["output_ids"], prompts))
                want = list(pool.map(lambda p: generate(SINGLE, p, 10)["output_ids"], prompts))
            self.assertEqual(got, want)
            self.assertIn("(data-parallel attention: ", dp.log())
            self.assertIn(" on each of 2 ranks, each holding its own requests' KV)", dp.log())
        self.assertEqual(dp.returncode, 0, dp.log()[-3000:])
        self.assertEqual(dp.rank_exit_codes(), {0: 0, 1: 0}, dp.log()[-3000:])
        dp.remove_stdout_files()

    def test_start_up_says_the_world(self):
        log = TP.log()
        for rank in (0, 1):
            self.assertIn(f"world: rank {rank} of 2 on ", log)
        self.assertEqual(log.count(" MiB of weights (its shard)"), 2, log[-3000:])
        self.assertIn("tp 2, ep 1", log)
        status, body = ls.get(TP.url + "/server_info")
        self.assertEqual(status, 200)
        info = json.loads(body)
        self.assertEqual(info["config"]["settings"]["tp-size"]["value"], 2)
        world = info["world"]
        self.assertEqual([(r["rank"], r["tp"], r["ep"]) for r in world], [(0, 2, 1), (1, 2, 1)])
        for r in world:
            self.assertIn(f"world: rank {r['rank']} of 2 on {r['host']}: tp 2, ep 1, "
                          f"{r['weight_bytes'] / (1 << 20):.2f} MiB of weights (its shard)", log)
            # OMP_NUM_THREADS=1 (lucid_server's MPI_ENV); the CPUs are the rank's affinity.
            self.assertEqual(r["threads"], 1)
            self.assertFalse(r["dp_attention"])
            self.assertIn(f"(its shard), 1 kernel thread on cpus {r['cpus']}\n", log)
            self.assertRegex(r["cpus"], r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


class RefusalTest(unittest.TestCase):
    def test_tp_size_without_mpirun_and_one_rank_of_several_are_refused(self):
        args = [ls.BINARY, "serve", "--model-path", api.MODEL_DIR, "--port", str(ls.free_port())]
        alone = subprocess.run(args + ["--tp-size", "2"], capture_output=True, text=True,
                               timeout=60, env=ls.ENV)
        self.assertEqual(alone.returncode, 2, alone.stderr)
        self.assertIn("launch it as `mpirun -np 2 lucid serve ...`", alone.stderr)
        ranks = ls.TpLucidServer(api.MODEL_DIR)
        ranks.log_path = os.path.join(TMP.name, "refused")
        both = subprocess.run(ranks.launcher() + args, capture_output=True, text=True, timeout=60,
                              env=dict(ls.ENV, **ls.MPI_ENV))
        self.assertIn("lucid rank 0 exited with status 2", both.stderr)
        self.assertIn("lucid rank 1 exited with status 2", both.stderr)
        self.assertIn("but --tp-size is 1: give --tp-size 2", both.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)

"""End-to-end: a two-rank server (`mpirun --enable-recovery -np 2 lucid serve --tp-size 2`, tiny
DeepSeek-V3 fixture) whose worker rank is killed (SIGKILL).

- While a request is in flight: the streaming request gets an error event naming the failed
  collective (then [DONE]), a non-streaming one an error status with that message; /health turns
  503 with status "failed"; mpirun (rank 0) exits non-zero within the stated bound.
- While idle: the heartbeat notices the dead worker; /health turns 503 and the server exits
  non-zero within the bound as well.
- Rank 0 killed: the worker, without heartbeats, exits 1 within the collective timeout.
Rank 0's exit status is read from lucid_server.RANK_WRAPPER's line (mpirun --enable-recovery
exits 0 whatever its ranks' statuses). Under a plain mpirun (no --enable-recovery), a worker that
stalls (SIGSTOP) is noticed by the heartbeat the same way, and mpirun itself exits non-zero.
The stated bound (docs/PARALLEL.md): the collective timeout (2 s here, through
LUCID_COLLECTIVE_TIMEOUT_MS) + 1 s of heartbeat period + 2 s answering 503 + stopping; asserted
with SLACK seconds more for a loaded 2-core machine.
Run: .venv-e2e/bin/python tests/e2e/test_serve_tp_failure.py (ctest: mpi/e2e_serve_tp_failure).
"""

import concurrent.futures
import json
import os
import signal
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lucid_server as ls  # noqa: E402

try:
    import httpx
except ImportError as e:  # pragma: no cover
    sys.exit(f"the e2e tests need the packages of tests/e2e/requirements.txt: {e}")

TIMEOUT_S = 2.0
BOUND_S = TIMEOUT_S + 1 + 2  # the stated bound from the death to rank 0's exit, less stopping
SLACK_S = 8.0
ENV = dict(ls.ENV, LUCID_COLLECTIVE_TIMEOUT_MS=str(int(TIMEOUT_S * 1000)))
MODEL_DIR = None
TMP = None


def setUpModule():
    global MODEL_DIR, TMP
    TMP = tempfile.TemporaryDirectory(prefix="lucid-e2e-tpfail-")
    MODEL_DIR = ls.make_model_dir(TMP.name, "tiny_deepseek_v3")


def tearDownModule():
    TMP.cleanup()


class TpServerCase(unittest.TestCase):
    """A fresh two-rank server per test (its ranks killed at the end, whatever is left)."""
    RECOVERY = True

    def setUp(self):
        self.server = ls.TpLucidServer(MODEL_DIR, [], env=ENV,
                                       recovery=self.RECOVERY).start()
        self.pids = [self.server.rank_pid(r) for r in (0, 1)]

    def tearDown(self):
        for pid in self.pids:  # whatever is left of the ranks
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        if self.server.proc.poll() is None:
            self.server.proc.kill()
        self.server.proc.wait(timeout=30)
        self.server.remove_stdout_files()

    def wait_failed_and_exit(self, killed_at):
        """Asserts /health turns 503 "failed" and mpirun exits non-zero, both within the bound."""
        deadline = killed_at + BOUND_S + SLACK_S
        health = None
        while time.time() < deadline:
            try:
                status, body = ls.get(self.server.url + "/health", timeout=2)
            except OSError:  # the server has exited already: checked below
                break
            if status == 503:
                health = json.loads(body)
                break
            time.sleep(0.05)
        self.assertIsNotNone(health, "/health never answered 503:\n" + self.server.log()[-3000:])
        self.assertEqual(health["status"], "failed", health)
        self.assertIn("tensor-parallel group failed", health["error"]["message"])
        try:
            code = self.server.proc.wait(timeout=max(0.1, deadline - time.time()))
        except Exception:  # subprocess.TimeoutExpired
            self.fail(f"mpirun still running {BOUND_S + SLACK_S} s after the kill:\n"
                      + self.server.log()[-3000:])
        took = time.time() - killed_at
        log = self.server.log()
        self.assertEqual(self.server.rank_exit_codes().get(0), 1, log[-3000:])
        if not self.RECOVERY:
            self.assertNotEqual(code, 0, log[-3000:])
        self.assertIn("the tensor-parallel group failed", log)
        self.assertIn("exiting with status 1", log)
        print(f"  (rank 0 exited with 1, mpirun with {code}, {took:.1f} s after the kill; "
              f"bound {BOUND_S} s + {SLACK_S} s slack)", file=sys.stderr)
        return took


class KilledWorkerTest(TpServerCase):
    def test_a_killed_worker_fails_the_request_in_flight_and_the_server(self):
        url = self.server.url
        body = {"prompt": "in flight", "max_tokens": 400, "temperature": 0, "ignore_eos": True}
        events = []
        with httpx.Client(timeout=60) as h, \
                h.stream("POST", url + "/v1/completions", json=dict(body, stream=True)) as r, \
                concurrent.futures.ThreadPoolExecutor(1) as pool:
            self.assertEqual(r.status_code, 200)
            lines = r.iter_lines()
            for line in lines:  # the first token: the request is running
                if line.startswith("data: "):
                    events.append(line[6:])
                    break
            plain = pool.submit(ls.post, url + "/v1/completions", body, None, 60)
            os.kill(self.server.rank_pid(1), signal.SIGKILL)
            killed_at = time.time()
            events += [line[6:] for line in lines if line.startswith("data: ")]
            status, plain_body = plain.result(timeout=60)
        self.assertEqual(events[-1], "[DONE]", events[-3:])
        error = json.loads(events[-2])
        self.assertIn("error", error, events[-3:])
        message = error["error"]["message"]
        # "forward: all-reduce on rank 0 of 2 did not complete within 2000 ms: a peer rank died or
        # stalled" here (shared memory); MPI's own message after the name where it sees the death.
        self.assertIn(" on rank 0 of 2", message)
        self.assertTrue(message.startswith("forward: "), message)
        finished = [json.loads(e)["choices"][0].get("finish_reason") for e in events[1:-2]]
        self.assertNotIn("length", finished)  # it did not run to its end
        # The non-streaming request: failed by the same step or refused as the server fails.
        self.assertIn(status, (500, 503), plain_body)
        self.assertIn("error", json.loads(plain_body))
        self.wait_failed_and_exit(killed_at)

    def test_the_idle_heartbeat_notices_a_killed_worker(self):
        self.assertEqual(ls.get(self.server.url + "/health")[0], 200)
        os.kill(self.server.rank_pid(1), signal.SIGKILL)
        self.wait_failed_and_exit(time.time())


class KilledLeaderTest(TpServerCase):
    def test_a_worker_whose_rank_0_died_exits_1_within_the_timeout(self):
        self.assertEqual(ls.get(self.server.url + "/health")[0], 200)
        os.kill(self.server.rank_pid(0), signal.SIGKILL)
        killed_at = time.time()
        # No more heartbeats: the worker's wait for the next message fails after the timeout.
        self.server.proc.wait(timeout=TIMEOUT_S + SLACK_S)
        took = time.time() - killed_at
        log = self.server.log()
        self.assertEqual(self.server.rank_exit_codes(), {0: 137, 1: 1}, log[-3000:])
        self.assertIn("lucid serve (rank 1): the tensor-parallel group failed", log)
        self.assertLess(took, TIMEOUT_S + SLACK_S)
        print(f"  (the worker exited {took:.1f} s after rank 0's death)", file=sys.stderr)


class StalledWorkerTest(TpServerCase):
    RECOVERY = False  # mpirun's own exit status then says the server failed

    def test_the_idle_heartbeat_notices_a_stalled_worker(self):
        self.assertEqual(ls.get(self.server.url + "/health")[0], 200)
        os.kill(self.server.rank_pid(1), signal.SIGSTOP)
        self.wait_failed_and_exit(time.time())


if __name__ == "__main__":
    unittest.main(verbosity=2)

"""End-to-end: the OpenMP wait policy `lucid serve` runs with (--cpu-wait-policy, docs/CONFIG.md).

libgomp reads OMP_WAIT_POLICY / GOMP_SPINCOUNT before main, so lucid applies its policy by
re-executing itself; what the running server really has is read from /proc/<pid>/environ (the
oracle: the kernel's copy of the process environment), and what it says about it from
/server_info. The user's own OMP_WAIT_POLICY must be left exactly as set, and a flag that
contradicts it refused at start-up with exit status 2. Model: tiny_glm_moe_dsa with the byte-level
tokenizer of lucid_server.make_model_dir.
Run: .venv-e2e/bin/python tests/e2e/test_serve_threads.py (ctest runs it as e2e_serve_threads).
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lucid_server as ls  # noqa: E402

TMP = None
MODEL_DIR = None
OMP_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def setUpModule():
    global TMP, MODEL_DIR
    TMP = tempfile.TemporaryDirectory(prefix="lucid-e2e-")
    MODEL_DIR = ls.make_model_dir(TMP.name)


def tearDownModule():
    TMP.cleanup()


def base_env(**extra):
    env = {k: v for k, v in ls.ENV.items() if k not in OMP_VARS and not k.startswith("LUCID_")}
    env.update(extra)
    return env


def proc_environ(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        items = [kv.decode(errors="replace") for kv in f.read().split(b"\0") if kv]
    return dict(kv.split("=", 1) for kv in items if "=" in kv)


def wait_policy_setting(server):
    status, body = ls.get(server.url + "/server_info")
    assert status == 200, body
    return json.loads(body)["config"]["settings"]["cpu-wait-policy"]


class WaitPolicyTest(unittest.TestCase):
    def test_default_is_a_short_spin_in_the_running_process(self):
        with ls.LucidServer(MODEL_DIR, env=base_env()) as server:
            env = proc_environ(server.proc.pid)
            self.assertIn("GOMP_SPINCOUNT", env, "the server runs with libgomp's default spin")
            spin = int(env["GOMP_SPINCOUNT"])
            # libgomp's default is 300000 spins (~ms); the point is a much shorter one.
            self.assertLessEqual(spin, 30000)
            self.assertNotIn("OMP_WAIT_POLICY", env)
            setting = wait_policy_setting(server)
            self.assertEqual(setting["value"], "short-spin")
            self.assertEqual(setting["source"], "rule:wait-policy-short-spin")
            self.assertIn("wait-policy-short-spin", server.log())

    def test_users_omp_wait_policy_is_left_as_set(self):
        for policy in ("active", "passive"):
            with self.subTest(policy=policy):
                with ls.LucidServer(MODEL_DIR, env=base_env(OMP_WAIT_POLICY=policy)) as server:
                    env = proc_environ(server.proc.pid)
                    self.assertEqual(env.get("OMP_WAIT_POLICY"), policy)
                    self.assertNotIn("GOMP_SPINCOUNT", env)
                    setting = wait_policy_setting(server)
                    self.assertEqual(setting["value"], "environment")
                    self.assertEqual(setting["source"], "rule:wait-policy-environment")

    def test_flag_is_applied(self):
        with ls.LucidServer(MODEL_DIR, ["--cpu-wait-policy", "passive"], env=base_env()) as server:
            env = proc_environ(server.proc.pid)
            self.assertEqual(env.get("OMP_WAIT_POLICY"), "passive")
            self.assertNotIn("GOMP_SPINCOUNT", env)
            setting = wait_policy_setting(server)
            self.assertEqual(setting["value"], "passive")
            self.assertEqual(setting["source"], "user:cli")

    def test_flag_contradicting_users_variable_is_refused(self):
        out = subprocess.run([ls.BINARY, "serve", "--model-path", MODEL_DIR, "--port", "1",
                              "--cpu-wait-policy", "short-spin"], capture_output=True, text=True,
                             timeout=60, env=base_env(OMP_WAIT_POLICY="active"))
        self.assertEqual(out.returncode, 2, out.stderr)
        lines = out.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, out.stderr)
        self.assertIn("--cpu-wait-policy short-spin", lines[0])
        self.assertIn("OMP_WAIT_POLICY=active", lines[0])


if __name__ == "__main__":
    unittest.main()

"""Benchmark (not a test): back-to-back requests to `lucid serve` on a CPU that other processes use.

Starts `lucid serve` on the tiny bundled model (tests/e2e/lucid_server.py) once per configuration,
optionally with HOGS CPU-bound competitor processes (`while 1: pass`) running, sends REQUESTS
completions one after another (each waits for the previous answer) and prints p50/p99/total.
Configurations alternate in the order given, ROUNDS times (ABBA with two rounds and two configs).
Bounded: every request has a 120 s timeout and the hogs are killed on exit.

  LUCID_BINARY=build/lucid python3 tests/load/busy_cpu.py --requests 200 --hogs 2 \
      --config default: --config libgomp-default:--cpu-wait-policy=environment \
      --config one-thread:OMP_NUM_THREADS=1

A --config is NAME:ARGS where ARGS is comma-separated; VAR=value items go to the environment,
--flag=value items to `lucid serve`.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import lucid_server as ls  # noqa: E402


def parse_config(text):
    name, _, rest = text.partition(":")
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")}
    args = []
    for item in filter(None, rest.split(",")):
        if item.startswith("--"):
            flag, _, value = item.partition("=")
            args += [flag, value] if value else [flag]
        else:
            k, _, v = item.partition("=")
            env[k] = v
    return name, args, env


def run_one(model_dir, args, env, requests, max_tokens):
    lat = []
    with ls.LucidServer(model_dir, args, env=env) as server:
        body = {"prompt": "hello there", "max_tokens": max_tokens, "temperature": 0}
        t0 = time.time()
        for _ in range(requests):
            t = time.time()
            status, out = ls.post(server.url + "/v1/completions", body, timeout=120)
            if status != 200:
                raise RuntimeError(f"status {status}: {out[:200]}")
            lat.append(time.time() - t)
        total = time.time() - t0
    lat.sort()
    return {"p50": statistics.median(lat), "p99": lat[min(len(lat) - 1, int(0.99 * len(lat)))],
            "total": total}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--hogs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--config", action="append", required=True)
    a = ap.parse_args()
    configs = [parse_config(c) for c in a.config]
    hogs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(a.hogs)]
    try:
        with tempfile.TemporaryDirectory(prefix="lucid-busy-") as tmp:
            model_dir = ls.make_model_dir(tmp)
            order = []
            for r in range(a.rounds):
                order += configs if r % 2 == 0 else configs[::-1]
            for name, args, env in order:
                res = run_one(model_dir, args, env, a.requests, a.max_tokens)
                print(f"{name:24s} hogs {a.hogs}  {a.requests} requests: total {res['total']:7.2f} s"
                      f"  p50 {res['p50'] * 1e3:8.1f} ms  p99 {res['p99'] * 1e3:8.1f} ms",
                      flush=True)
    finally:
        for h in hogs:
            h.kill()
            h.wait()


if __name__ == "__main__":
    main()

"""Benchmark (not a test): back-to-back requests to `lucid serve` on a CPU that other processes use.

Starts `lucid serve` on the tiny bundled model (tests/e2e/lucid_server.py) once per configuration,
with each count of HOGS CPU-bound competitor processes (`while 1: pass`) running, sends REQUESTS
completions one after another (each waits for the previous answer) and prints p50/p99/total, the
load average and the server's kernel team at the end (lucid_cpu_team_threads, lowerings).
With --decode-tokens N it also times one greedy request of N new tokens (ms per token; the
prompt is 11 bytes, so this is decode). Per round: every hog count, every configuration in the
order given; ROUNDS times, reversed every other round (ABBA with two rounds and two configs).
Bounded: every request has a 120 s timeout and the hogs are killed on exit.

  LUCID_BINARY=build/lucid python3 tests/load/busy_cpu.py --requests 200 --hogs 0,1 \
      --config default: --config ignore:--cpu-contention=ignore --decode-tokens 256

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


def complete(server, body):
    status, out = ls.post(server.url + "/v1/completions", body, timeout=120)
    if status != 200:
        raise RuntimeError(f"status {status}: {out[:200]}")


def run_one(model_dir, args, env, requests, max_tokens, decode_tokens):
    lat = []
    res = {}
    with ls.LucidServer(model_dir, args, env=env) as server:
        body = {"prompt": "hello there", "max_tokens": max_tokens, "temperature": 0}
        t0 = time.time()
        for _ in range(requests):
            t = time.time()
            complete(server, body)
            lat.append(time.time() - t)
        res["total"] = time.time() - t0
        if decode_tokens:
            t = time.time()
            complete(server, {"prompt": "hello there", "max_tokens": decode_tokens,
                              "temperature": 0, "ignore_eos": True})
            res["ms_per_token"] = (time.time() - t) * 1e3 / decode_tokens
        m = ls.metrics(server.url)
        res["team"] = m.get("lucid_cpu_team_threads", float("nan"))
        res["lowerings"] = m.get("lucid_cpu_team_lowerings_total", float("nan"))
    lat.sort()
    res["p50"] = statistics.median(lat)
    res["p99"] = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--hogs", default="2", help="competitor counts, comma-separated: 0,1")
    ap.add_argument("--decode-tokens", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--config", action="append", required=True)
    a = ap.parse_args()
    configs = [parse_config(c) for c in a.config]
    hog_counts = [int(h) for h in a.hogs.split(",")]
    hogs = []
    try:
        with tempfile.TemporaryDirectory(prefix="lucid-busy-") as tmp:
            model_dir = ls.make_model_dir(tmp)
            for r in range(a.rounds):
                for n in hog_counts if r % 2 == 0 else hog_counts[::-1]:
                    while len(hogs) > n:
                        h = hogs.pop()
                        h.kill()
                        h.wait()
                    while len(hogs) < n:
                        hogs.append(subprocess.Popen([sys.executable, "-c", "while 1: pass"]))
                    for name, args, env in configs if r % 2 == 0 else configs[::-1]:
                        res = run_one(model_dir, args, env, a.requests, a.max_tokens,
                                      a.decode_tokens)
                        decode = (f"  decode {res['ms_per_token']:6.2f} ms/token"
                                  if a.decode_tokens else "")
                        print(f"{name:16s} hogs {n}  {a.requests} requests: total "
                              f"{res['total']:7.2f} s  p50 {res['p50'] * 1e3:7.1f} ms  p99 "
                              f"{res['p99'] * 1e3:7.1f} ms{decode}  team {res['team']:.0f} "
                              f"(lowered {res['lowerings']:.0f}x)  load "
                              f"{os.getloadavg()[0]:.1f}", flush=True)
    finally:
        for h in hogs:
            h.kill()
            h.wait()


if __name__ == "__main__":
    main()

"""Load harness for `lucid serve` (issue 26, item 9): bounded, loopback only, stops by itself.

Starts `lucid serve` on the tiny bundled model (tests/e2e/lucid_server.py), sends REQUESTS mixed
requests at CONCURRENCY from threads of raw sockets and checks, at the end:
  - the server never crashed (still running, /health 200),
  - no KV page leaked (lucid_kv_pages_used == 0 once idle),
  - every error answer is OpenAI-shaped JSON ({"error": {message, type, param, code}}),
  - every normal request succeeded;
and prints p50/p99 latency of the normal requests and the count of each kind.

Kinds (by share): normal completions (plain, streamed, chat, /generate), malformed (bad JSON,
wrong types, unknown fields, bad Content-Length), disconnecting (a stream closed after its first
bytes, a request closed half sent), over-long prompts, slow clients (headers trickled over ~1 s).

  LUCID_BINARY=build/lucid python3 tests/load/load_test.py [--requests 3000] [--concurrency 32]

ctest runs a short version (load_short: 300 requests at concurrency 16). Python stdlib only.
"""
import argparse
import json
import os
import random
import socket
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import lucid_server as ls  # noqa: E402

NORMAL = [
    ("/v1/completions", {"prompt": "hello", "max_tokens": 8}),
    ("/v1/completions", {"prompt": [5, 6, 7], "max_tokens": 8, "stream": True}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}),
    ("/generate", {"text": "abc", "sampling_params": {"max_new_tokens": 8}}),
]
MALFORMED = [
    b"{not json",
    json.dumps({"prompt": "x", "max_tokens": "3"}).encode(),
    json.dumps({"prompt": "x", "n": 0}).encode(),  # unknown fields are accepted (lenient)
    json.dumps({"prompt": []}).encode(),
    json.dumps({"prompt": "x", "temperature": -1}).encode(),
    b"[" * 100 + b"]" * 100,
]


class Outcome:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.latencies = []
        self.failures = []

    def add(self, kind, ok, detail="", latency=None):
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            if latency is not None:
                self.latencies.append(latency)
            if not ok:
                self.failures.append(f"{kind}: {detail}")


def http_request(port, method, path, body=b"", headers=None, content_length=None):
    h = {"Host": "127.0.0.1", "Content-Type": "application/json", "Connection": "close"}
    h.update(headers or {})
    h["Content-Length"] = str(len(body)) if content_length is None else content_length
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items())
    return head.encode() + b"\r\n" + body


def exchange(port, raw, trickle_s=0.0, timeout=60):
    """Sends raw (trickled over trickle_s), reads to EOF; returns (status, headers, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        if trickle_s > 0:
            head_end = raw.index(b"\r\n\r\n")
            step = trickle_s / max(1, head_end)
            for i in range(head_end):
                s.sendall(raw[i:i + 1])
                time.sleep(step)
            s.sendall(raw[head_end:])
        else:
            s.sendall(raw)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode(errors="replace").split("\r\n")
    status = int(lines[0].split(" ")[1]) if lines and lines[0].startswith("HTTP/1.1 ") else 0
    headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    if headers.get("transfer-encoding") == "chunked":
        body = dechunk(body)
    return status, headers, body


def dechunk(b):
    out = b""
    while b:
        size_line, _, rest = b.partition(b"\r\n")
        n = int(size_line.split(b";")[0] or b"0", 16)
        if n == 0:
            break
        out += rest[:n]
        b = rest[n + 2:]
    return out


def openai_shaped(body):
    try:
        j = json.loads(body)
    except ValueError:
        return False
    e = j.get("error") if isinstance(j, dict) else None
    return isinstance(e, dict) and all(k in e for k in ("message", "type", "param", "code")) \
        and isinstance(e["message"], str)


def check_error(out, kind, status, body, want_status=None):
    ok = status >= 400 and openai_shaped(body) and (want_status is None or status == want_status)
    out.add(kind, ok, f"status {status}: {body[:200]!r}")


def run_one(port, rng, out, context_len):
    r = rng.random()
    t0 = time.monotonic()
    if r < 0.6:
        path, body = rng.choice(NORMAL)
        status, _, resp = exchange(port, http_request(port, "POST", path, json.dumps(body).encode()))
        ok = status == 200 and (body.get("stream") and b"data: [DONE]" in resp
                                or not body.get("stream") and resp.startswith(b"{"))
        out.add("normal", ok, f"{path} status {status}: {resp[:200]!r}", time.monotonic() - t0)
    elif r < 0.7:
        body = rng.choice(MALFORMED)
        status, _, resp = exchange(port, http_request(port, "POST", "/v1/completions", body))
        check_error(out, "malformed", status, resp, 400)
    elif r < 0.75:
        length = rng.choice(["-1", "abc", "99999999999"])
        status, _, resp = exchange(port, http_request(port, "POST", "/v1/completions", b"{}",
                                                      content_length=length))
        check_error(out, "bad_length", status, resp)
    elif r < 0.85:
        body = json.dumps({"prompt": [5], "max_tokens": 50, "ignore_eos": True, "stream": True})
        raw = http_request(port, "POST", "/v1/completions", body.encode())
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            if rng.random() < 0.5:
                s.sendall(raw[:len(raw) // 2])  # half a request, then gone
            else:
                s.sendall(raw)
                s.recv(64)  # the first bytes of the stream, then gone
        out.add("disconnect", True)
    elif r < 0.95:
        body = json.dumps({"prompt": "a" * (context_len + 10), "max_tokens": 4})
        status, _, resp = exchange(port, http_request(port, "POST", "/v1/completions",
                                                      body.encode()))
        check_error(out, "over_long", status, resp, 400)
    else:
        path, body = NORMAL[0]
        status, _, resp = exchange(port, http_request(port, "POST", path, json.dumps(body).encode()),
                                   trickle_s=1.0)
        out.add("slow", status == 200, f"status {status}: {resp[:200]!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--seed", type=int, default=26)
    ap.add_argument("--time-limit", type=float, default=900, help="seconds; the run stops itself")
    a = ap.parse_args()
    tmp = tempfile.TemporaryDirectory(prefix="lucid-load-")
    model = ls.make_model_dir(tmp.name)
    context_len = 512
    server = ls.LucidServer(model, ["--context-length", str(context_len)]).start()
    out = Outcome()
    next_index = [0]
    lock = threading.Lock()
    deadline = time.monotonic() + a.time_limit

    def worker(wid):
        rng = random.Random(a.seed * 1000 + wid)
        while time.monotonic() < deadline:
            with lock:
                if next_index[0] >= a.requests:
                    return
                next_index[0] += 1
            try:
                run_one(server.port, rng, out, context_len)
            except OSError as e:  # a connection refused or reset is a failure of the server
                out.add("socket_error", False, repr(e))

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(a.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    problems = list(out.failures)
    if next_index[0] < a.requests:
        problems.append(f"time limit: only {next_index[0]} of {a.requests} requests sent")
    crashed = server.proc.poll() is not None
    if crashed:
        problems.append(f"lucid serve exited with {server.proc.returncode}")
    else:
        pages = None
        for _ in range(100):  # aborted streams free their pages at their next write
            m = ls.metrics(server.url)
            pages = m.get("lucid_kv_pages_used")
            if pages == 0:
                break
            time.sleep(0.1)
        if pages != 0:
            problems.append(f"leaked KV pages: lucid_kv_pages_used = {pages}")
        status, _ = ls.get(server.url + "/health")
        if status != 200:
            problems.append(f"/health answered {status} after the run")
    code = server.stop()
    if not crashed and code != 0:
        problems.append(f"lucid serve exited with {code} on SIGINT")
    lat = sorted(out.latencies)
    p = (lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000) if lat else (lambda q: 0)
    print(f"load: {sum(out.counts.values())} requests in {wall:.1f} s at concurrency "
          f"{a.concurrency}: " + ", ".join(f"{k} {v}" for k, v in sorted(out.counts.items())))
    print(f"load: normal requests p50 {p(0.5):.1f} ms, p99 {p(0.99):.1f} ms"
          + (f", mean {statistics.mean(lat) * 1000:.1f} ms" if lat else ""))
    print(f"load: crashed {int(crashed)}, problems {len(problems)}")
    for line in problems[:20]:
        print("  " + line)
    if problems:
        print(server.log()[-3000:])
    tmp.cleanup()
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

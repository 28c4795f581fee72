"""Test harness: starts the real `lucid serve` on a free loopback port and stops it.

The bundled tiny models have 256-token vocabularies and no tokenizer, so `make_model_dir` builds a
model directory on the fly that pairs tests/fixtures/models/tiny_glm_moe_dsa (symlinked) with a
byte-level BPE tokenizer.json written here: 256 ids, id = byte value (GPT-2's byte-to-unicode
alphabet), no merges, no added tokens, so every id of the model's vocabulary decodes to one byte
and any text encodes to ids < 256. A tiny chat template is written to tokenizer_config.json.
Everything is bounded: start-up, requests and shutdown have timeouts, and the process is killed
if it does not stop.
"""

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

SOURCE_DIR = os.environ.get("LUCID_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BINARY = os.environ.get("LUCID_BINARY", os.path.join(SOURCE_DIR, "build", "lucid"))
TINY_MODEL = os.path.join(SOURCE_DIR, "tests", "fixtures", "models", "tiny_glm_moe_dsa")
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
# Same thread count for the server and the `lucid generate` reference, so their float sums agree.
ENV = dict(os.environ, OMP_NUM_THREADS="1")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def byte_level_tokenizer():
    table = bytes_to_unicode()
    vocab = {table[b]: b for b in range(256)}
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None, "pre_tokenizer": level, "post_processor": None, "decoder": level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": False,
                  "byte_fallback": False, "ignore_merges": False, "vocab": vocab, "merges": []},
    }


def make_model_dir(root):
    d = os.path.join(root, "tiny")
    os.makedirs(d, exist_ok=True)
    for f in ("config.json", "model.safetensors", "generation_config.json"):
        src = os.path.join(TINY_MODEL, f)
        link = os.path.join(d, f)
        if os.path.lexists(link):  # a link left by an earlier run may point at another checkout
            os.remove(link)
        if os.path.exists(src):
            os.symlink(os.path.abspath(src), link)
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(byte_level_tokenizer(), f)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": CHAT_TEMPLATE}, f)
    return d


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LucidServer:
    """`lucid serve` on 127.0.0.1:<free port>; use as a context manager or call start/stop."""

    def __init__(self, model_dir, extra_args=(), name="tiny", env=None):
        self.model_dir = model_dir
        self.env = ENV if env is None else env
        self.extra_args = list(extra_args)
        self.name = name
        self.proc = None
        self.port = None
        self.log_path = None
        self.returncode = None

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout=120):
        for _ in range(3):  # a port taken between free_port() and bind: try another
            self.port = free_port()
            fd, self.log_path = tempfile.mkstemp(prefix="lucid-serve-", suffix=".log")
            args = [BINARY, "serve", "--model-path", self.model_dir, "--host", "127.0.0.1",
                    "--port", str(self.port), "--served-model-name", self.name,
                    "--max-total-tokens", "16384", "--log-level", "info"] + self.extra_args
            self.proc = subprocess.Popen(args, stdout=fd, stderr=fd, env=self.env)
            os.close(fd)
            if self._wait_ready(timeout):
                return self
            if self.proc.poll() is None:
                self.stop()
            if "cannot listen" not in self.log():
                break
        raise RuntimeError("lucid serve did not become ready:\n" + self.log()[-4000:])

    def _wait_ready(self, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return True
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.1)
        return False

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self, sig=signal.SIGINT, timeout=60):
        """Sends `sig`, waits for exit (kills after `timeout`); returns the exit status."""
        if self.proc is None or self.proc.poll() is not None:
            self.returncode = self.proc.returncode if self.proc else None
            return self.returncode
        self.proc.send_signal(sig)
        try:
            self.returncode = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.returncode = self.proc.wait(timeout=10)
        return self.returncode

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def get(url, timeout=30):
    """(status, body bytes) of a GET, without raising on HTTP errors."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def post(url, body, headers=None, timeout=60):
    """(status, body bytes) of a POST; `body` is bytes, str or a JSON-able object."""
    if not isinstance(body, (bytes, str)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers=dict({"Content-Type": "application/json"}, **(headers or {})))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def metrics(url):
    """The /metrics samples without labels (and with), as {name or name{labels}: float}."""
    status, body = get(url + "/metrics")
    assert status == 200, status
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def reference_greedy(model_dir, prompt_ids, max_new_tokens, cpu_kernels="fast"):
    """Greedy tokens from `lucid generate` (one sequence, no server, no prefix cache), through the
    CPU kernel set `cpu_kernels` (auto, fast, fast-bf16act or reference: compare a server with
    the same set)."""
    out = subprocess.run([BINARY, "generate", "--model-path", model_dir, "--prompt-ids",
                          ",".join(map(str, prompt_ids)), "--max-new-tokens", str(max_new_tokens),
                          "--cpu-kernels", cpu_kernels, "--output", "json"],
                         capture_output=True, text=True, timeout=120, env=ENV)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)["token_ids"]

"""Test harness: starts the real `lucid serve` on a free loopback port and stops it.

The bundled tiny models have 256-token vocabularies and no tokenizer, so `make_model_dir` builds a
model directory on the fly that pairs tests/fixtures/models/tiny_glm_moe_dsa (symlinked) with a
byte-level BPE tokenizer.json written here: 256 ids, id = byte value (GPT-2's byte-to-unicode
alphabet), no merges, no added tokens, so every id of the model's vocabulary decodes to one byte
and any text encodes to ids < 256. A tiny chat template is written to tokenizer_config.json.
Everything is bounded: start-up, requests and shutdown have timeouts, and the process is killed
if it does not stop. `make_model_dir(root, fixture)` pairs another tiny fixture the same way, and
TpLucidServer starts a tensor-parallel server under mpirun (docs/PARALLEL.md).
"""

import json
import os
import re
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


def make_model_dir(root, fixture="tiny_glm_moe_dsa"):
    d = os.path.join(root, "tiny" if fixture == "tiny_glm_moe_dsa" else fixture)
    os.makedirs(d, exist_ok=True)
    for f in ("config.json", "model.safetensors", "generation_config.json"):
        src = os.path.join(SOURCE_DIR, "tests", "fixtures", "models", fixture, f)
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
            args = self.launcher() + [
                    BINARY, "serve", "--model-path", self.model_dir, "--host", "127.0.0.1",
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
        self._signal(sig)
        try:
            self.returncode = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.returncode = self.proc.wait(timeout=10)
        return self.returncode

    def launcher(self):
        """The command the server runs under (none; mpirun for TpLucidServer)."""
        return []

    def _signal(self, sig):
        self.proc.send_signal(sig)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


MPIRUN = os.environ.get("LUCID_MPIRUN", "mpirun")
# mpirun refuses root (CI containers) without these; one kernel thread per rank on 2 cores.
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMP_NUM_THREADS": "1"}


def _children():
    """{pid: [child pids]} of every process in /proc."""
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(d))
    return kids


# Runs one rank's lucid with its stdout in the file "$0.<rank>.stdout" and reports its exit status
# on stderr: mpirun --enable-recovery exits 0 whatever its ranks' statuses (OpenMPI 4.1), so the
# tests read each rank's from this line.
RANK_WRAPPER = ('"$@" >"$0.$OMPI_COMM_WORLD_RANK.stdout"; rc=$?; '
                'echo "lucid rank $OMPI_COMM_WORLD_RANK exited with status $rc" >&2; exit $rc')


class TpLucidServer(LucidServer):
    """`mpirun -np RANKS lucid serve --tp-size RANKS` on 127.0.0.1:<free port>, each rank under
    RANK_WRAPPER. By default mpirun runs with --enable-recovery, so that a worker's death is the
    server's to report (without it mpirun ends every rank at once); recovery=False leaves it out.
    stop() signals rank 0, as an operator does; rank_pid(r) finds a rank, rank_exit_codes() reads
    the ranks' statuses, rank_stdout(r) what a rank wrote on stdout."""

    def __init__(self, model_dir, extra_args=(), name="tiny", env=None, ranks=2, recovery=True):
        super().__init__(model_dir, list(extra_args) + ["--tp-size", str(ranks)], name,
                         dict(ENV if env is None else env, **MPI_ENV))
        self.mpirun = ([MPIRUN, "--oversubscribe"] + (["--enable-recovery"] if recovery else [])
                       + ["-np", str(ranks)])

    def launcher(self):
        return self.mpirun + ["sh", "-c", RANK_WRAPPER, self.log_path]

    def rank_stdout(self, rank):
        with open(f"{self.log_path}.{rank}.stdout", errors="replace") as f:
            return f.read()

    def remove_stdout_files(self):
        for name in os.listdir(os.path.dirname(self.log_path)):
            path = os.path.join(os.path.dirname(self.log_path), name)
            if path.startswith(self.log_path + ".") and path.endswith(".stdout"):
                os.remove(path)

    def rank_pid(self, rank):
        """The pid of rank `rank`'s lucid (a descendant of mpirun, OMPI_COMM_WORLD_RANK=rank)."""
        kids, todo = _children(), [self.proc.pid]
        while todo:
            pid = todo.pop()
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = f.read().split(b"\0")
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv0 = f.read().split(b"\0")[0]
            except OSError:
                env, argv0 = [], b""
            if (f"OMPI_COMM_WORLD_RANK={rank}".encode() in env
                    and os.path.basename(argv0) == os.path.basename(BINARY).encode()):
                return pid
            todo += kids.get(pid, [])
        raise RuntimeError(f"no rank {rank} under mpirun {self.proc.pid}")

    def rank_exit_codes(self):
        """{rank: exit status} of the ranks that have exited (RANK_WRAPPER's lines)."""
        return {int(m.group(1)): int(m.group(2))
                for m in re.finditer(r"lucid rank (\d+) exited with status (\d+)", self.log())}

    def _signal(self, sig):
        try:
            os.kill(self.rank_pid(0), sig)
        except (RuntimeError, ProcessLookupError):
            self.proc.send_signal(sig)


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

#!/usr/bin/env bash
# lucid vs llama.cpp, same random-weight GLM-5-shaped model (lucid synth 1g), same machine, same
# thread count. Re-runs the measurement on already-built binaries and already-converted models
# (nothing is rebuilt or converted here; see README.md for how they are made).
#
#   LLAMA_BIN=... CKPT=... GGUF=... bash tools/compare/llama_cpp/run.sh   # 2 threads, 2 rounds
#   THREADS=1 ROUNDS=3 ... bash tools/compare/llama_cpp/run.sh
#   FORMATS="bf16" ROUNDS=1 ... bash tools/compare/llama_cpp/run.sh       # quick look
#   LUCID_KERNELS=fast ... bash tools/compare/llama_cpp/run.sh             # lucid's ~16-bit activations
#   SUMMARY_ONLY=1 OUT=/tmp/llama_compare.X THREADS=2 bash tools/compare/llama_cpp/run.sh  # re-summarize
#   LUCID_ISA=avx2 ... bash tools/compare/llama_cpp/run.sh                 # cap lucid's ISA (LUCID_CPU_ISA)
#   ISA=avx2 LLAMA_BIN=build-llama-avx2/bin ... bash tools/compare/llama_cpp/run.sh
#       # both engines at the AVX2 level on any x86-64: lucid capped with LUCID_CPU_ISA=avx2, llama.cpp
#       # built with GGML_NATIVE=OFF GGML_AVX2=ON (README.md); the summary fails (exit 2) if lucid's
#       # machine lines or llama.cpp's system_info lines show another level
#   smollm2.sh: the same for SmolLM2-135M-Instruct's Q4_1 GGUF, one file for both engines
#
# Rounds alternate the order (odd: lucid first, even: llama.cpp first) and every run is preceded by
# `uptime`, so drift and load from other users show up. Raw logs go to $OUT; the summary at the end
# prints medians over rounds (and min..max) of every figure for both engines.
set -u

# ---- paths (edit here) ----------------------------------------------------------------------------
LUCID=${LUCID:-build/lucid}                        # the lucid binary to measure
LLAMA_BIN=${LLAMA_BIN:?set LLAMA_BIN to llama.cpp build/bin (see README.md)}
CKPT=${CKPT:?set CKPT to the directory holding the lucid checkpoints}
GGUF=${GGUF:?set GGUF to the directory holding the converted GGUF files}
# format name : lucid checkpoint dir : llama.cpp gguf   (lucid dir "-" = llama.cpp only)
PAIRS=${PAIRS:-"bf16:$CKPT/lucid_1g_glm:$GGUF/glm1g-bf16.gguf
fp8:$CKPT/lucid_1g_glm_fp8:$GGUF/glm1g-q8_0.gguf
nvfp4:$CKPT/lucid_1g_glm_nvfp4:$GGUF/glm1g-nvfp4.gguf
q4_0:-:$GGUF/glm1g-q4_0.gguf"}
FORMATS=${FORMATS:-"bf16 fp8 nvfp4 q4_0"}   # which PAIRS rows to run
THREADS=${THREADS:-2}
LUCID_KERNELS=${LUCID_KERNELS:-auto}         # lucid bench --cpu-kernels (auto: bf16 inputs, as llama.cpp)
LUCID_ISA=${LUCID_ISA:-}                     # LUCID_CPU_ISA cap for lucid (scalar|avx2|avx512|avx512bf16; empty: none)
ISA=${ISA:-}                                 # avx2: both engines at AVX2 (sets LUCID_ISA, checks llama.cpp's build)
[ -n "$ISA" ] && LUCID_ISA=$ISA
ROUNDS=${ROUNDS:-2}
FA=${FA:-1}                                  # llama.cpp flash attention (auto resolves to 1 on CPU)
OUT=${OUT:-/tmp/llama_compare.$(date -u +%Y%m%dT%H%M%S)}
# ----------------------------------------------------------------------------------------------------

# /usr/bin/time appends "## time: ..." to each log: cpu share = (user+sys)/(wall*threads) shows how
# much of the requested CPUs the run actually got on a shared machine.
TIME="/usr/bin/time -f ##_time:_wall_%e_s_user_%U_s_sys_%S_s"
mkdir -p "$OUT"
echo "raw logs: $OUT  (threads $THREADS, rounds $ROUNDS, formats $FORMATS)"
for b in "$LUCID" "$LLAMA_BIN/llama-bench" "$LLAMA_BIN/llama-batched-bench"; do
  [ -x "$b" ] || { echo "missing binary $b" >&2; exit 1; }
done
echo "lucid: $($LUCID --version 2>&1)   llama.cpp: $($LLAMA_BIN/llama-bench --version 2>&1 | grep -m1 version:)"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) | nproc $(nproc) | $(free -g | awk '/Mem:/{print $2 " GB RAM"}')"

run_lucid() {  # fmt dir round
  local f="$OUT/lucid.$1.t$THREADS.r$3.log"
  { echo "## uptime: $(uptime)"; echo "## LUCID_CPU_ISA=$LUCID_ISA OMP_NUM_THREADS=$THREADS $LUCID bench --model-path $2 --batch 1,8,32 --prompt-len 512 --gen-len 16 --repeats 3 --cpu-kernels $LUCID_KERNELS"; } > "$f"
  env ${LUCID_ISA:+LUCID_CPU_ISA=$LUCID_ISA} OMP_NUM_THREADS=$THREADS $TIME -o "$f" -a "$LUCID" bench --model-path "$2" --batch 1,8,32 --prompt-len 512 \
      --gen-len 16 --repeats 3 --cpu-kernels "$LUCID_KERNELS" >> "$f" 2>&1
  echo "## uptime after: $(uptime)" >> "$f"
  echo "--- lucid $1 round $3 ($(grep -m1 '^## uptime' "$f" | sed 's/.*load/load/'))"
  grep -E '^(machine|prefill|decode|##_time)' "$f"
}

run_llama() {  # fmt gguf round
  local f="$OUT/llama.$1.t$THREADS.r$3.log" g="$OUT/llamab.$1.t$THREADS.r$3.log"
  { echo "## uptime: $(uptime)"; echo "## $LLAMA_BIN/llama-bench -m $2 -t $THREADS -fa $FA -p 512 -n 64 -r 3"; } > "$f"
  $TIME -o "$f" -a "$LLAMA_BIN/llama-bench" -m "$2" -t "$THREADS" -fa "$FA" -p 512 -n 64 -r 3 >> "$f" 2>&1
  echo "## uptime after: $(uptime)" >> "$f"
  echo "--- llama-bench $1 round $3 ($(grep -m1 '^## uptime' "$f" | sed 's/.*load/load/'))"
  grep -E '^\| (model|glm|llama)|^##_time' "$f"
  # -kvu: one unified KV pool (otherwise n_ctx is split per sequence: 4096/32 = 128 cells < 512);
  # -pps: the 512-token prompt is prefilled once and shared, so each of B sequences decodes at ctx 512+.
  { echo "## uptime: $(uptime)"; echo "## $LLAMA_BIN/llama-batched-bench -m $2 -t $THREADS -fa $FA -c 4096 -npp 512 -ntg 16 -npl 1,8,32 -kvu -pps"; } > "$g"
  $TIME -o "$g" -a "$LLAMA_BIN/llama-batched-bench" -m "$2" -t "$THREADS" -fa "$( [ "$FA" = 1 ] && echo on || echo off )" \
      -c 4096 -npp 512 -ntg 16 -npl 1,8,32 -kvu -pps >> "$g" 2>&1
  echo "## uptime after: $(uptime)" >> "$g"
  echo "--- llama-batched-bench $1 round $3 ($(grep -m1 '^## uptime' "$g" | sed 's/.*load/load/'))"
  grep -E '^\||^##_time' "$g"
}

# SUMMARY_ONLY=1 OUT=dir: only print the summary of the logs already in dir.
[ -n "${SUMMARY_ONLY:-}" ] && ROUNDS=0
for r in $(seq 1 "$ROUNDS"); do
  for fmt in $FORMATS; do
    row=$(printf '%s\n' "$PAIRS" | grep "^$fmt:") || { echo "no PAIRS row for $fmt" >&2; continue; }
    ldir=$(echo "$row" | cut -d: -f2); gguf=$(echo "$row" | cut -d: -f3)
    if [ $((r % 2)) -eq 1 ]; then
      [ "$ldir" != "-" ] && run_lucid "$fmt" "$ldir" "$r"
      run_llama "$fmt" "$gguf" "$r"
    else
      run_llama "$fmt" "$gguf" "$r"
      [ "$ldir" != "-" ] && run_lucid "$fmt" "$ldir" "$r"
    fi
  done
done

# ---- summary: median and best (max) over rounds ---------------------------------------------------
# On a shared box the best of N is the least-disturbed run; the median shows how typical it is.
python3 - "$OUT" "$THREADS" $FORMATS <<'EOF'
import glob, re, statistics, sys
out, threads, fmts = sys.argv[1], sys.argv[2], sys.argv[3:]
def rd(f): return open(f).read()
def load(t):
    m = re.search(r'load average: ([\d.]+)', t); return float(m.group(1)) if m else None
def share(t):
    m = re.search(r'##_time:_wall_([\d.]+)_s_user_([\d.]+)_s_sys_([\d.]+)_s', t)
    return (float(m.group(2)) + float(m.group(3))) / (float(m.group(1)) * int(threads)) * 100 if m else None
def fl(m, g): return float(m.group(g)) if m else None
def mb(xs):
    xs = [x for x in xs if x is not None]
    if not xs: return '-'
    return f"{statistics.median(xs):.1f} / {max(xs):.1f}" if len(xs) > 1 else f"{xs[0]:.1f}"
rows, loads = [], []
for fmt in fmts:
    L = {k: [] for k in ('pp', 'b1', 'b8', 'b32', 'cpu')}
    for f in sorted(glob.glob(f"{out}/lucid.{fmt}.t{threads}.r*.log")):
        t = rd(f); loads.append(load(t)); L['cpu'].append(share(t))
        L['pp'].append(fl(re.search(r'^prefill\s+512 tokens:\s+[\d.]+ ms\s+([\d.]+) tok/s', t, re.M), 1))
        for b in (1, 8, 32):
            L[f'b{b}'].append(fl(re.search(rf'^decode\s+batch\s+{b} ctx\s+\d+: step\s+[\d.]+ ms\s+([\d.]+) tok/s', t, re.M), 1))
    G = {k: [] for k in ('pp', 'tg64', 'bpp', 'b1', 'b8', 'b32', 'cpu')}
    for f in sorted(glob.glob(f"{out}/llama.{fmt}.t{threads}.r*.log")):
        t = rd(f); loads.append(load(t)); G['cpu'].append(share(t))
        G['pp'].append(fl(re.search(r'\|\s*pp512\s*\|\s*([\d.]+) ±', t), 1))
        G['tg64'].append(fl(re.search(r'\|\s*tg64\s*\|\s*([\d.]+) ±', t), 1))
    for f in sorted(glob.glob(f"{out}/llamab.{fmt}.t{threads}.r*.log")):
        t = rd(f); loads.append(load(t)); G['cpu'].append(share(t))
        for b in (1, 8, 32):
            m = re.search(rf'^\|\s*512\s*\|\s*16\s*\|\s*{b}\s*\|\s*\d+\s*\|\s*[\d.]+\s*\|\s*([\d.]+)\s*\|\s*[\d.]+\s*\|\s*([\d.]+)\s*\|', t, re.M)
            if b == 1: G['bpp'].append(fl(m, 1))
            G[f'b{b}'].append(fl(m, 2))
    rows.append((fmt, L, G))
ld = [x for x in loads if x is not None]
print(f"\n=== summary: {threads} thread(s); each cell: median / best over rounds (tok/s); 1-min load average seen {min(ld, default=0):.1f}..{max(ld, default=0):.1f} ===")
print("lucid: `lucid bench` prefill 512 and decode at ctx 512 (median step of 16). llama.cpp: llama-bench pp512 / tg64 (mean of 3),")
print("llama-batched-bench -npp 512 -ntg 16 -pps: S_PP at B=1 and S_TG at B=1/8/32 (decode at ctx 512..528, mean of 16 steps).")
print("| format | engine | prefill 512 | decode B=1 | B=8 | B=32 | tg64 (ctx 0-64) | cpu share % |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for fmt, L, G in rows:
    if any(x is not None for x in L['pp'] + L['b1']):
        print(f"| {fmt} | lucid | {mb(L['pp'])} | {mb(L['b1'])} | {mb(L['b8'])} | {mb(L['b32'])} | | {mb(L['cpu'])} |")
    print(f"| {fmt} | llama.cpp | bench {mb(G['pp'])}; batched {mb(G['bpp'])} | {mb(G['b1'])} | {mb(G['b8'])} | {mb(G['b32'])} | {mb(G['tg64'])} | {mb(G['cpu'])} |")
EOF

# ISA=avx2: every lucid log's machine line must say "isa avx2", and llama.cpp's CPU backend
# (libggml-cpu.so beside its binaries, or linked into them) must hold AVX2 code (ymm registers)
# and no AVX-512 code (zmm registers): what it was compiled for, whatever this CPU has.
if [ -n "$ISA" ]; then
  echo "lucid machine lines: $(grep -ho 'isa [a-z0-9]*' "$OUT"/lucid.*.log | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
  lib="$LLAMA_BIN/libggml-cpu.so"; [ -e "$lib" ] || lib="$LLAMA_BIN/llama-bench"
  zmm=$(objdump -d "$lib" | grep -c '%zmm'); ymm=$(objdump -d "$lib" | grep -c '%ymm')
  echo "llama.cpp $(basename "$lib"): $ymm instructions on ymm, $zmm on zmm registers"
  bad=0
  grep -ho 'isa [a-z0-9]*' "$OUT"/lucid.*.log | grep -qv "isa $ISA" && bad=1
  if [ "$ISA" = avx2 ]; then
    { [ "$ymm" -gt 0 ] && [ "$zmm" = 0 ]; } || bad=1
  fi
  [ "$bad" = 0 ] || { echo "run.sh: not both engines at $ISA (see the lines above)" >&2; exit 2; }
fi

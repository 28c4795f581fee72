#!/usr/bin/env bash
# What a GPU machine needs to run scripts/cuda_check.sh on a build made here, in .device/ (ignored):
#   .device/lucid-cuda.tar.xz  the CUDA build's lucid, lucid_backends_cuda_tests,
#                              lucid_dist_nccl_tests and (when built) lucid_cuda_matmul_bench, and
#                              the shared libraries they load except
#                              glibc, the CUDA driver, cuBLAS/cuBLASLt and NCCL (the GPU machine's
#                              CUDA 13 has those; the Debian libraries here it may not have);
#   .device/whl/               wheels for the GPU machine's Python 3.12 of the openai client and
#                              the packages it needs that that image lacks (test_serve_cuda.py).
# The device tool carries `.device`; cuda_check.sh unpacks both when it finds them.
#   scripts/cuda_bundle.sh [BUILD_DIR]      (default build, configured with -DLUCID_CUDA=ON)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bins=(lucid lucid_backends_cuda_tests lucid_dist_nccl_tests)
for b in "${bins[@]}"; do
  [ -x "$build/$b" ] || { echo "cuda_bundle: $build/$b missing (a CUDA build: scripts/build.sh)"; exit 2; }
done
# The matmul micro-benchmark is built only where Google Benchmark is found.
[ -x "$build/benchmarks/lucid_cuda_matmul_bench" ] && bins+=(benchmarks/lucid_cuda_matmul_bench)
rm -rf .device/bundle .device/whl && mkdir -p .device/bundle/bin/real .device/bundle/lib .device/whl
for path in "${bins[@]}"; do
  b=$(basename "$path")
  cp "$build/$path" .device/bundle/bin/real/
  # A wrapper that finds the bundled libraries first, then the machine's CUDA ones.
  cat >".device/bundle/bin/$b" <<WRAP
#!/usr/bin/env bash
here=\$(cd "\$(dirname "\$0")" && pwd)
cuda=\$(ls -d /usr/local/cuda/lib64 /usr/local/cuda/lib /opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib 2>/dev/null | paste -sd:)
export LD_LIBRARY_PATH="\$here/../lib:\$cuda\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "\$here/real/$b" "\$@"
WRAP
  chmod +x ".device/bundle/bin/$b"
done
ldd "${bins[@]/#/$build/}" | awk '/=> \//{print $3}' | sort -u |
  grep -v -E '/(libc|libm|libdl|libpthread|librt|libcuda|libcublas|libcublasLt|libnccl)\.so|ld-linux' |
  while read -r lib; do cp -L "$lib" .device/bundle/lib/; done
tar -C .device -cJf .device/lucid-cuda.tar.xz bundle
rm -rf .device/bundle
# openai 1.109.1 and what it and pydantic need beyond the GPU image's packages (anyio, httpx,
# httpcore, h11, certifi, idna, tqdm, typing-extensions are there), as tests/e2e/requirements.txt
# pins them.
pip=.venv-e2e/bin/pip
[ -x "$pip" ] || pip="python3 -m pip"
wheels=()
for name in openai distro jiter pydantic pydantic_core annotated-types typing-inspection sniffio; do
  wheels+=("$(grep -i -E "^${name//[-_]/[-_]}==" tests/e2e/requirements.txt)")
done
$pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .device/whl "${wheels[@]}"
du -sh .device/lucid-cuda.tar.xz .device/whl

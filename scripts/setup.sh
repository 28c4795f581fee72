#!/usr/bin/env bash
# Installs every system package the build and the tests need. Idempotent; quiet when all is present.
set -euo pipefail
PKGS=(
  build-essential cmake pkg-config
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  libpcre2-dev libicu-dev libhwy-dev libxxhash-dev libcpp-httplib-dev libomp-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-venv
  clang-14 libclang-rt-14-dev
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

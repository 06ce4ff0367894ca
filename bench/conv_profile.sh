#!/usr/bin/env bash
# Nsight Compute on our conv kernels for a few bench/conv.py problems (one timed rep each):
# duration, DRAM and L1 throughput, occupancy, registers, the top warp stall.
#   bash bench/conv_profile.sh [problem,...]   (run from /tmp after installing the package)
set -uo pipefail
OUT=${OUT:-/tmp/td-out}
here=$(cd "$(dirname "$0")" && pwd)
only=${1:-mbv2_dw3x3,resnext50_s2,convnext_dw7x7}
# the dispatcher's pick only, one timed rep: every conv kernel launch of the run is profiled
ncu --kernel-name regex:'conv_(dw_)?(fwd|bwd|mma|wgrad)' --launch-count 80 \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  python3 "$here/conv.py" --only "$only" --reps 1 --pick-only > "$OUT/ncu.log" 2>&1
grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|L1/TEX Cache Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per Thread|Theoretical Occupancy|Warp Cycles Per Issued|Dynamic Shared Memory Per Block|Grid Size|spends" "$OUT/ncu.log" \
  | sed -E 's/ +/ /g' | cut -c1-220

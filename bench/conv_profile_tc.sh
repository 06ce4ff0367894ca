#!/usr/bin/env bash
# Nsight Compute detail on the tensor-core conv kernels (conv_mma_tiled.cuh) of a few
# bench/conv.py problems: instruction mix, shared-memory wavefronts and bank conflicts,
# scheduler and stall statistics. Run from /tmp after installing the package.
#   bash bench/conv_profile_tc.sh [problem,...]
set -uo pipefail
OUT=${OUT:-/tmp/td-out}
here=$(cd "$(dirname "$0")" && pwd)
only=${1:-grouped3d_g16,resnext101_32x8d}
ncu --kernel-name regex:'conv_(fwd|wgrad)_tc' --launch-count 8 \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section InstructionStats \
  --section MemoryWorkloadAnalysis_Tables --section SchedulerStats --section ComputeWorkloadAnalysis \
  python3 "$here/conv.py" --only "$only" --reps 1 --pick-only > "$OUT/ncu_tc.log" 2>&1
grep -E "^  [a-z_]+.*\(|Duration|Executed Instructions  |Issued Instructions  |Shared .*(Wavefronts|Conflict)|Bank|Issue Slots Busy|Executed Ipc A|Pipe|No Eligible|spends|Achieved Occupancy|L1/TEX Cache Throughput|Compute \(SM\)" "$OUT/ncu_tc.log" \
  | sed -E 's/ +/ /g' | cut -c1-220

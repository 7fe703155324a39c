#!/usr/bin/env bash
# Every GPU check in one call on the device machine (which has CUDA, PyTorch and
# compute-sanitizer but no Rust): the binaries are built here with
# `tools/gpu/build_carry.sh` into target/gpu-carry/ and carried there.
#
#   tools/gpu/run_all.sh [tests] [sanitize] [bench] [sweep]    (default: all but sweep)
#
# Writes everything it prints to $OUT/log.txt as well (when $OUT is set).
set -u
cd "$(dirname "$0")/../.."
C=target/gpu-carry
export GRAPHRW_CORPUS=$PWD/$C/corpus
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64
OUT=${OUT:-/tmp}
steps=${*:-tests sanitize bench}
exec > >(tee "$OUT/log.txt") 2>&1
nvidia-smi -L
has() { [[ " $steps " == *" $1 "* ]]; }
if has tests; then
  echo "== CUDA tests"
  $C/cuda_sdpa --test-threads=1 --nocapture 2>&1 | grep -v "^$"
  $C/cuda_ops --test-threads=1 --nocapture 2>&1 | grep -v "^$"
  $C/cuda_corpus --test-threads=1 --nocapture 2>&1 | grep -v "^$"
fi
if has sanitize; then
  echo "== compute-sanitizer (memcheck) on the SDPA and op tests"
  compute-sanitizer --tool memcheck --print-limit 10 $C/cuda_sdpa --test-threads=1 gpu_ 2>&1 | tail -n 8
  compute-sanitizer --tool memcheck --print-limit 10 $C/cuda_ops --test-threads=1 2>&1 | tail -n 8
fi
if has sweep; then
  echo "== SDPA config sweep (warps,block_n,m_tiles,q_in_regs) at S=2048,4096"
  for cfg in "4,64,2,0" "8,64,1,0" "8,64,1,1" "4,32,2,0" "8,32,1,0" "4,64,1,1" "4,64,2,1"; do
    echo "-- $cfg"
    GRAPHRW_SDPA_CFG=$cfg $C/cuda_sdpa_bench bench "$OUT/sweep_$cfg.csv" 2048 4096 >/dev/null 2>&1
    cat "$OUT/sweep_$cfg.csv" | tail -n +2 | tr '\n' ' '; echo
  done
fi
if has bench; then
  echo "== SDPA: graphrw vs PyTorch (B=4, H=16)"
  $C/cuda_sdpa_bench bench "$OUT/ours.csv" && python3 $C/sdpa_torch.py bench "$OUT/ours.csv"
fi

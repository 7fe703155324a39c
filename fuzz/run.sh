#!/usr/bin/env bash
# Builds a fuzz target with nightly and libFuzzer's coverage flags (what `cargo fuzz build`
# does, without needing cargo-fuzz installed) and runs it on fuzz/seeds plus a working
# corpus. Usage: fuzz/run.sh [TARGET] [SECONDS] [libFuzzer args...]
#   TARGET defaults to `pipeline`, SECONDS to 60. One job, nice 19.
set -euo pipefail
cd "$(dirname "$0")"
target="${1:-pipeline}"
secs="${2:-60}"
shift $(( $# > 2 ? 2 : $# ))
triple="$(rustc -vV | sed -n 's/^host: //p')"
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
 -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
nice -n 19 cargo +nightly build --release --target "$triple" --bin "$target"
mkdir -p "corpus/$target" "artifacts/$target"
exec nice -n 19 "target/$triple/release/$target" "corpus/$target" seeds \
  -max_total_time="$secs" -artifact_prefix="artifacts/$target/" -print_final_stats=1 "$@"

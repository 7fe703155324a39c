#!/usr/bin/env bash
# Builds the GPU binaries here (release, feature cuda) and puts them, the corpus and the
# PyTorch script in DEST (default: target/gpu-carry of this checkout) for `run_all.sh`.
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=${1:-target/gpu-carry}
mkdir -p "$DEST"
exe() { # the test executable cargo prints for `--no-run`
  cargo test --release --features cuda "$@" --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["profile"]["test"]: print(m["executable"])' | tail -n 1
}
cp "$(exe -p graphrw-kernels --test cuda_sdpa)" "$DEST/cuda_sdpa"
cp "$(exe -p graphrw-kernels --test cuda_ops)" "$DEST/cuda_ops"
cp "$(exe -p graphrw --test cuda_corpus)" "$DEST/cuda_corpus"
cargo build --release -p graphrw-kernels --features cuda --example cuda_sdpa_bench
cp "${CARGO_TARGET_DIR:-target}/release/examples/cuda_sdpa_bench" "$DEST/"
cp tools/gpu/sdpa_torch.py tools/gpu/run_all.sh "$DEST/"
rm -rf "$DEST/corpus" && cp -r ../shared/corpus "$DEST/corpus"
du -sh "$DEST"

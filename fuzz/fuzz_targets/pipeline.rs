//! Fuzzes the whole path a model takes through `graphrw optimize`: load, verify, then
//! for every rule set (`all` and each `--rules` value) optimise, verify, save, load
//! again and verify. See `graphrw_fuzz::pipeline` for the oracle.
//!
//! Run with `cargo +nightly fuzz run pipeline fuzz/seeds` (or see `fuzz/run.sh`, which
//! builds the target with plain cargo and nightly, no cargo-fuzz needed).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    graphrw_fuzz::pipeline(data);
    let _ = graphrw::onnx::decode_tensor_pb(data);
});

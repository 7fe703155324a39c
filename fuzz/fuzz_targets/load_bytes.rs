//! Fuzzes the ONNX loader: any bytes give a graph or an error, never a panic, an
//! abort or an allocation of a size the bytes only declare.
//!
//! Run with `cargo +nightly fuzz run load_bytes` from the repository root (seeds:
//! `fuzz/seeds/`, made by `fuzz/make_seeds.py`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(graph) = graphrw::onnx::load_bytes(data) {
        // What loads must print, verify and export without panicking.
        let _ = graph.to_string();
        let _ = graphrw::onnx::to_bytes(&graph);
    }
    let _ = graphrw::onnx::decode_tensor_pb(data);
});

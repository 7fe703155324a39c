//! # 6. ONNX in and out, and the CLI
//!
//! [`onnx::load`](crate::onnx::load) reads an ONNX model (opsets
//! [`MIN_OPSET`](crate::onnx::MIN_OPSET) to [`MAX_OPSET`](crate::onnx::MAX_OPSET)) with
//! its external data into a [`Graph`](crate::Graph) over graphrw's vocabulary; weights
//! are memory-mapped, not read. [`onnx::save`](crate::onnx::save) writes a graph back as
//! a model onnxruntime runs: a fused attention node as the standard `Attention` op
//! (opset 23), a generated kernel as its standard op where one exists
//! (`LayerNormalization`, `RMSNormalization`, `Gelu`), otherwise as a model-local
//! function whose body is its decomposition. Models with dynamic axes load with
//! symbolic dims (`batch`, `past + seq`) and are saved with them.
//!
//! A round trip, through a file, of an attention block fused by the built-in rules:
//!
//! ```
//! use graphrw::exec::{default_stack, plan, reference_stack};
//! use graphrw::{onnx, rules, Builder, DType, Tensor, TensorMeta};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let g = Builder::new();
//! let m = TensorMeta::new(DType::F32, [1usize, 2, 8, 4]);
//! let (q, k, v) = (g.input("q", m.clone()), g.input("k", m.clone()), g.input("v", m));
//! let out = q.matmul(k.transpose(-2, -1)?)?.div(2.0)?.softmax(-1)?.matmul(v)?;
//! g.output(&[out])?;
//! let unfused = g.finish();
//!
//! let mut graph = unfused.clone();
//! let done = rules::optimize(&mut graph)?;
//! assert_eq!(done.fused_nodes.get("scaled_dot_product_attention"), Some(&1));
//!
//! let dir = std::env::temp_dir().join(format!("graphrw-guide-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! let path = dir.join("fused.onnx");
//! onnx::save(&graph, &path)?;
//! let back = onnx::load(&path)?;
//! assert_eq!(back.nodes_with_op("scaled_dot_product_attention").count(), 1);
//!
//! // The loaded model, on the default (fast) stack, computes what the unfused graph
//! // computes on the reference kernels.
//! let data = |seed: f32| {
//!     let v: Vec<f32> = (0..64).map(|i| ((i as f32 * seed).sin())).collect();
//!     Tensor::from_vec(vec![1, 2, 8, 4], v)
//! };
//! let inputs = [data(0.3)?, data(0.7)?, data(1.1)?];
//! let (got, _) = plan(&back, &default_stack())?.run(&inputs)?;
//! let (want, _) = plan(&unfused, &reference_stack())?.run(&inputs)?;
//! for (a, b) in got[0].to_f64_vec().iter().zip(want[0].to_f64_vec()) {
//!     assert!((a - b).abs() < 1e-5, "{a} vs {b}");
//! }
//! std::fs::remove_dir_all(&dir)?;
//! # Ok(())
//! # }
//! ```
//!
//! [`onnx::to_bytes`](crate::onnx::to_bytes) and
//! [`onnx::load_bytes`](crate::onnx::load_bytes) do the same in memory;
//! [`onnx::save_with`](crate::onnx::save_with) chooses the weights' layout (inline, or
//! external data beside the model). Malformed or hostile files are errors naming the
//! node or tensor at fault, never panics, and no declared size is allocated before it
//! is checked against the bytes present.
//!
//! ## The command line
//!
//! `graphrw` (crate `graphrw-cli`: `cargo install graphrw-cli`, or `cargo run --release
//! -p graphrw-cli --` in the repository) does the same on files. `graphrw --help` and
//! `graphrw help SUBCOMMAND` describe every option.
//!
//! ```sh
//! graphrw inspect model.onnx                 # ops with counts, inputs and outputs
//! graphrw print model.onnx                   # the model as a program, one op per line
//! graphrw optimize model.onnx -o fused.onnx  # built-in rules; reports what fired
//! graphrw run MODEL_DIR --repeat 5 --compare # MODEL_DIR/model.onnx on its test data
//! graphrw run MODEL_DIR --model fused.onnx --profile
//! graphrw explain model.onnx                             # every site: fused, or why not
//! graphrw explain model.onnx --rule attention            # the rule's near misses
//! graphrw explain model.onnx --rule attention --node t41 # why not at t41
//! graphrw dot model.onnx --highlight attention -o model.dot
//! graphrw ops softmax                        # an op of the vocabulary
//! ```
//!
//! `run` takes a folder in the ONNX test layout (`model.onnx` beside
//! `test_data_set_*/input_N.pb` and `output_N.pb`), optimises the model, runs it on the
//! default stack and compares with the expected outputs; `--executors reference` runs
//! the model as loaded on the reference kernels, `--profile` prints where the time went
//! per op. Its times come with the machine they were taken on, one line such as
//! `cpu: AMD EPYC; AVX2+FMA, no AVX-512; kernels: avx2` (the CPU, its vector
//! extensions, and the level the kernels run at, which `GRAPHRW_ISA` lowers).
//! [`onnx::read_tensor_pb`](crate::onnx::read_tensor_pb) reads those `.pb` files from
//! Rust.
//!
//! Next: [using graphrw from your crate](super::_07_your_crate).

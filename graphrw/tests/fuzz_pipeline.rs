//! The fuzz target's oracle (`fuzz/src/lib.rs`: load, verify, `optimize` with every rule
//! set, verify, save, load again, verify; error first lines <= 200 chars) on stable:
//!
//! - `seeds_and_regressions_pass_the_pipeline_oracle` replays `fuzz/seeds/` and every
//!   input a fuzzer found (`fuzz/regressions/`) in each test run;
//! - `mutation_fuzz` (ignored) is a libFuzzer-free random-mutation fuzzer over the same
//!   oracle, for machines where building the nightly, coverage-instrumented target
//!   (`fuzz/run.sh`) is too slow: byte mutations (flips, interesting values, cuts,
//!   splices) and protobuf-aware ones (attributes, dims, op types, operands rewired);
//!   it keeps an input that reaches a new outcome (error kind, ops loaded, rules fired).
//!   Run: `GRAPHRW_FUZZ_SECS=1800 cargo test -p graphrw --release --test fuzz_pipeline
//!   -- --ignored --nocapture`; findings go to `fuzz/artifacts/pipeline/`.

#[path = "../../fuzz/src/lib.rs"]
mod oracle;

use std::collections::{BTreeSet, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use graphrw::onnx::proto::{AttributeProto, ModelProto};
use prost::Message;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|r| r.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    v.retain(|p| p.is_file());
    v.sort();
    v
}

#[test]
fn seeds_and_regressions_pass_the_pipeline_oracle() {
    let mut seen = 0;
    for dir in ["seeds", "regressions"] {
        for file in files(&fuzz_dir().join(dir)) {
            let bytes = std::fs::read(&file).expect("read seed");
            if catch_unwind(|| oracle::pipeline(&bytes)).is_err() {
                panic!(
                    "{}: the pipeline oracle failed (panic above)",
                    file.display()
                );
            }
            seen += 1;
        }
    }
    assert!(
        seen >= 6,
        "only {seen} seeds found under {}",
        fuzz_dir().display()
    );
}

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// The most inputs the fuzzer keeps.
const MAX_CORPUS: usize = 4096;

const INTERESTING: [i64; 14] = [
    0,
    1,
    -1,
    2,
    3,
    7,
    -7,
    1000,
    -1000,
    i32::MAX as i64,
    i64::MAX,
    i64::MIN,
    1 << 40,
    -2,
];

fn mutate_attr(a: &mut AttributeProto, r: &mut Rng) {
    let v = INTERESTING[r.below(INTERESTING.len())];
    match r.below(4) {
        0 => a.i = v,
        1 if !a.ints.is_empty() => {
            let k = r.below(a.ints.len());
            a.ints[k] = v;
        }
        1 => a.ints.push(v),
        2 => a.f = [0.0, -1.0, f32::NAN, f32::INFINITY, 1e30, 0.5][r.below(6)],
        _ => a.r#type = r.below(16) as i32,
    }
}

const OPS: [&str; 24] = [
    "Softmax",
    "Gather",
    "Reshape",
    "Transpose",
    "MatMul",
    "Add",
    "Mul",
    "Div",
    "Concat",
    "Split",
    "Slice",
    "LayerNormalization",
    "Where",
    "Expand",
    "Unsqueeze",
    "Squeeze",
    "ReduceMean",
    "Cast",
    "Gemm",
    "Erf",
    "Sqrt",
    "Pow",
    "Tanh",
    "Trilu",
];

/// A protobuf-aware mutation, or `None` when `bytes` does not decode.
fn mutate_proto(bytes: &[u8], r: &mut Rng) -> Option<Vec<u8>> {
    let mut m = ModelProto::decode(bytes).ok()?;
    let g = m.graph.as_mut()?;
    for _ in 0..1 + r.below(3) {
        match r.below(7) {
            0 if !g.node.is_empty() => {
                let n = r.below(g.node.len());
                let node = &mut g.node[n];
                if node.attribute.is_empty() {
                    node.attribute.push(AttributeProto {
                        name: ["axis", "perm", "axes", "keepdims", "transB", "to"][r.below(6)]
                            .into(),
                        r#type: 2,
                        ..Default::default()
                    });
                }
                let k = r.below(node.attribute.len());
                mutate_attr(&mut node.attribute[k], r);
            }
            1 if !g.node.is_empty() => {
                let n = r.below(g.node.len());
                g.node[n].op_type = OPS[r.below(OPS.len())].into();
            }
            2 if !g.node.is_empty() => {
                // Rewire an operand to another value of the graph.
                let names: Vec<String> = g
                    .input
                    .iter()
                    .map(|i| i.name.clone())
                    .chain(g.node.iter().flat_map(|n| n.output.clone()))
                    .chain(g.initializer.iter().map(|t| t.name.clone()))
                    .collect();
                let n = r.below(g.node.len());
                let node = &mut g.node[n];
                if !names.is_empty() {
                    let name = names[r.below(names.len())].clone();
                    if node.input.is_empty() || r.below(4) == 0 {
                        node.input.push(name);
                    } else {
                        let k = r.below(node.input.len());
                        node.input[k] = name;
                    }
                }
            }
            3 if !g.initializer.is_empty() => {
                let t = r.below(g.initializer.len());
                let init = &mut g.initializer[t];
                if !init.int64_data.is_empty() {
                    let k = r.below(init.int64_data.len());
                    init.int64_data[k] = INTERESTING[r.below(INTERESTING.len())];
                } else if !init.raw_data.is_empty() && init.data_type == 7 {
                    let k = r.below(init.raw_data.len() / 8) * 8;
                    let v = INTERESTING[r.below(INTERESTING.len())].to_le_bytes();
                    init.raw_data[k..k + 8].copy_from_slice(&v);
                } else if !init.dims.is_empty() {
                    let k = r.below(init.dims.len());
                    init.dims[k] = INTERESTING[r.below(INTERESTING.len())];
                }
            }
            4 if !g.input.is_empty() => {
                let i = r.below(g.input.len());
                let dims = g.input[i]
                    .r#type
                    .as_mut()
                    .and_then(|t| t.tensor_type.as_mut())
                    .and_then(|t| t.shape.as_mut());
                if let Some(shape) = dims {
                    if !shape.dim.is_empty() {
                        let k = r.below(shape.dim.len());
                        if r.below(3) == 0 {
                            shape.dim.remove(k);
                        } else {
                            let v = [0, 1, 2, 3, 5, 16, -1][r.below(7)];
                            shape.dim[k].value =
                                Some(graphrw::onnx::proto::DimensionValue::DimValue(v));
                        }
                    }
                }
            }
            5 if g.node.len() > 1 => {
                let (a, b) = (r.below(g.node.len()), r.below(g.node.len()));
                g.node.swap(a, b);
            }
            6 if !g.node.is_empty() => {
                let n = r.below(g.node.len());
                let dup = g.node[n].clone();
                g.node.push(dup);
            }
            _ => {
                if let Some(o) = m.opset_import.first_mut() {
                    o.version = [1, 7, 11, 13, 17, 18, 21, 23, 99][r.below(9)];
                }
            }
        }
    }
    Some(m.encode_to_vec())
}

fn mutate_bytes(input: &[u8], other: &[u8], r: &mut Rng) -> Vec<u8> {
    let mut b = input.to_vec();
    for _ in 0..1 + r.below(4) {
        let len = b.len();
        match r.below(6) {
            0 if len > 0 => {
                let k = r.below(len);
                b[k] ^= 1 << r.below(8);
            }
            1 if len > 0 => {
                let k = r.below(len);
                b[k] = [0u8, 1, 0x7f, 0x80, 0xff, 0x08, 0x12][r.below(7)];
            }
            2 if len > 1 => b.truncate(r.below(len)),
            3 => {
                let k = r.below(len + 1);
                let n = 1 + r.below(8);
                let bytes: Vec<u8> = (0..n).map(|_| r.next() as u8).collect();
                b.splice(k..k, bytes);
            }
            4 if len > 2 => {
                let (s, e) = (r.below(len), r.below(len));
                let (s, e) = (s.min(e), s.max(e));
                b.drain(s..e);
            }
            _ if !other.is_empty() => {
                let k = r.below(len + 1);
                let s = r.below(other.len());
                let e = s + r.below(other.len() - s);
                b.truncate(k);
                b.extend_from_slice(&other[s..e]);
            }
            _ => {}
        }
    }
    b
}

/// A cheap stand-in for coverage: what the pipeline did with an input.
fn outcome(bytes: &[u8]) -> String {
    match graphrw::onnx::load_bytes(bytes) {
        Err(e) => {
            let msg = e.to_string();
            // The error's kind: its last clause, without names and numbers.
            let last = msg.rsplit(": ").next().unwrap_or("");
            let kind: String = last
                .chars()
                .filter(|c| c.is_ascii_lowercase() || *c == ' ')
                .take(40)
                .collect();
            format!("err:{kind}")
        }
        Ok(g) => {
            let ops: BTreeSet<&str> = g.op_counts().keys().copied().collect();
            let mut o = g.clone();
            let fired = match graphrw::rules::optimize(&mut o) {
                Ok(done) => format!("{:?}", done.fused_nodes.keys().collect::<Vec<_>>()),
                Err(_) => "optimize-err".into(),
            };
            format!("ok:{ops:?}:{fired}")
        }
    }
}

#[test]
#[ignore = "a fuzzer: run with GRAPHRW_FUZZ_SECS=N -- --ignored --nocapture"]
fn mutation_fuzz() {
    let secs: u64 = std::env::var("GRAPHRW_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let seed: u64 = std::env::var("GRAPHRW_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x9E37_79B9_7F4A_7C15);
    let artifacts = fuzz_dir().join("artifacts/pipeline");
    std::fs::create_dir_all(&artifacts).expect("artifacts dir");
    let mut corpus: Vec<Vec<u8>> = ["seeds", "regressions", "corpus/pipeline"]
        .iter()
        .flat_map(|d| files(&fuzz_dir().join(d)))
        .filter_map(|p| std::fs::read(p).ok())
        .collect();
    assert!(!corpus.is_empty(), "no seeds");
    let mut outcomes: HashMap<String, usize> = HashMap::new();
    for c in &corpus {
        *outcomes.entry(outcome(c)).or_default() += 1;
    }
    // Panics are findings: record the message instead of printing it.
    let last_panic: Arc<Mutex<String>> = Arc::default();
    let hook_slot = last_panic.clone();
    std::panic::set_hook(Box::new(move |info| {
        if let Ok(mut s) = hook_slot.lock() {
            *s = info.to_string();
        }
    }));
    let mut r = Rng(seed | 1);
    let start = Instant::now();
    let (mut execs, mut proto_execs) = (0u64, 0u64);
    let mut crashes: HashMap<String, PathBuf> = HashMap::new();
    let mut next_report = Duration::from_secs(60);
    while start.elapsed() < Duration::from_secs(secs) {
        let a = r.below(corpus.len());
        let b = r.below(corpus.len());
        let input = if r.below(2) == 0 {
            match mutate_proto(&corpus[a], &mut r) {
                Some(m) => {
                    proto_execs += 1;
                    m
                }
                None => mutate_bytes(&corpus[a], &corpus[b], &mut r),
            }
        } else {
            mutate_bytes(&corpus[a], &corpus[b], &mut r)
        };
        if input.len() > 1 << 20 {
            continue;
        }
        execs += 1;
        let result = catch_unwind(AssertUnwindSafe(|| {
            oracle::pipeline(&input);
            outcome(&input)
        }));
        match result {
            Ok(o) => {
                let seen = outcomes.entry(o).or_default();
                *seen += 1;
                if *seen == 1 && corpus.len() < MAX_CORPUS {
                    corpus.push(input);
                }
            }
            Err(_) => {
                let msg = last_panic.lock().map(|s| s.clone()).unwrap_or_default();
                // Dedupe by the message without numbers.
                let key: String = msg
                    .chars()
                    .filter(|c| !c.is_ascii_digit())
                    .take(160)
                    .collect();
                if !crashes.contains_key(&key) {
                    let path = artifacts.join(format!("crash-{}-{execs}", crashes.len()));
                    std::fs::write(&path, &input).expect("write crash");
                    eprintln!(
                        "CRASH #{} at exec {execs}: {msg}\n  saved {}",
                        crashes.len(),
                        path.display()
                    );
                    crashes.insert(key, path);
                }
            }
        }
        if start.elapsed() >= next_report {
            eprintln!(
                "#{execs} {:.0}s: corpus {} outcomes {} crashes {} ({:.0} exec/s)",
                start.elapsed().as_secs_f64(),
                corpus.len(),
                outcomes.len(),
                crashes.len(),
                execs as f64 / start.elapsed().as_secs_f64()
            );
            next_report += Duration::from_secs(60);
        }
    }
    let _ = std::panic::take_hook();
    let keep = fuzz_dir().join("corpus/pipeline");
    let _ = std::fs::create_dir_all(&keep);
    for (i, c) in corpus.iter().enumerate() {
        let _ = std::fs::write(keep.join(format!("c{i:05}")), c);
    }
    eprintln!(
        "done: {execs} execs ({proto_execs} protobuf-aware) in {:.0}s, corpus {}, distinct outcomes {}, crashes {}",
        start.elapsed().as_secs_f64(),
        corpus.len(),
        outcomes.len(),
        crashes.len()
    );
    for (k, p) in &crashes {
        eprintln!("  {}: {k}", p.display());
    }
    assert!(
        crashes.is_empty(),
        "{} distinct crashes found",
        crashes.len()
    );
}

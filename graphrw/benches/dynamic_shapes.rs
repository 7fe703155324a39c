//! What symbolic shapes cost at run time, on the real dynamic exports of
//! `../shared/corpus_dynamic`.
//!
//! For each model and each of its test sets (shapes other than the export's):
//! - **dynamic**: the model as published, planned once, its symbols bound at every run;
//! - **fixed**: the same file with its inputs' `dim_param`s replaced by the test set's
//!   sizes, so every shape folds to a constant at import: the same architecture exported
//!   with fixed shapes, planned for that one shape;
//! - **new shape**: the first run of the dynamic plan at this test set's shape right after
//!   runs at the other set's shape, against its steady runs (what a new shape costs).
//!
//! Both sides are optimised by `rules::optimize` and run on the default stack, alternated
//! run by run; the figure is the best time of each. Prints one row per model and shape.
//!
//! `cargo bench -p graphrw --bench dynamic_shapes` (`-- --rounds N --repeat M`, and
//! `--only NAME` for the models whose folder name contains `NAME`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use graphrw::exec::{default_stack, plan, Plan};
use graphrw::onnx::proto::{DimensionValue, ModelProto};
use graphrw::{onnx, rules, Tensor};
use prost::Message;

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/corpus_dynamic")
}

fn tensors(dir: &Path) -> Vec<Tensor> {
    (0..)
        .map(|i| dir.join(format!("input_{i}.pb")))
        .take_while(|p| p.exists())
        .map(|p| onnx::read_tensor_pb(&p).expect("input").1)
        .collect()
}

fn planned(model: &ModelProto, dir: &Path) -> Plan {
    let mut g = onnx::from_model(model, Some(dir)).expect("model loads");
    rules::optimize(&mut g).expect("optimizes");
    plan(&g, &default_stack()).expect("plans")
}

/// `model` with every input dim fixed to the sizes of `inputs`.
fn fixed(model: &ModelProto, inputs: &[Tensor]) -> ModelProto {
    let mut m = model.clone();
    let graph = m.graph.as_mut().expect("graph");
    for (vi, t) in graph.input.iter_mut().zip(inputs) {
        let shape = vi
            .r#type
            .as_mut()
            .and_then(|t| t.tensor_type.as_mut())
            .and_then(|t| t.shape.as_mut())
            .expect("tensor input with a shape");
        for (d, &n) in shape.dim.iter_mut().zip(t.shape()) {
            d.value = Some(DimensionValue::DimValue(n as i64));
        }
    }
    m
}

fn best(p: &Plan, inputs: &[Tensor], repeat: usize) -> Duration {
    (0..repeat)
        .map(|_| {
            let t = Instant::now();
            p.run(inputs).expect("runs");
            t.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The value of option `name` as text.
fn text_arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1).cloned()
}

fn main() {
    let (rounds, repeat) = (arg("--rounds", 3), arg("--repeat", 20));
    let only = text_arg("--only").unwrap_or_default();
    let root = corpus();
    let Ok(entries) = std::fs::read_dir(&root) else {
        println!("SKIPPED: no {} (the dynamic corpus)", root.display());
        return;
    };
    let mut models: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("model.onnx").exists())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().contains(&only))
        })
        .collect();
    models.sort();
    let isa = graphrw::KernelOptions::default().isa();
    println!("{}", graphrw::kernels::cpu::machine_line(isa));
    println!(
        "{:<22} {:>14} {:>10} {:>10} {:>7} {:>10} {:>8}",
        "model", "shape", "fixed ms", "dyn ms", "dyn/fix", "new shape", "new/run"
    );
    let mut ratios = Vec::new();
    for dir in models {
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("?")
            .to_string();
        let bytes = std::fs::read(dir.join("model.onnx")).expect("model file");
        let model = ModelProto::decode(bytes.as_slice()).expect("model decodes");
        let sets: Vec<Vec<Tensor>> = (0..)
            .map(|k| dir.join(format!("test_data_set_{k}")))
            .take_while(|d| d.exists())
            .map(|d| tensors(&d))
            .collect();
        let dynamic = planned(&model, &dir);
        for (k, inputs) in sets.iter().enumerate() {
            let twin = planned(&fixed(&model, inputs), &dir);
            let other = &sets[(k + 1) % sets.len()];
            let (mut f, mut d, mut first, mut steady) =
                (Duration::MAX, Duration::MAX, Duration::MAX, Duration::MAX);
            for _ in 0..rounds {
                // Fixed and dynamic alternate run by run, so that both see the same
                // machine (a sub-millisecond model's time swings by a third between
                // blocks of runs on a shared machine).
                for _ in 0..repeat {
                    f = f.min(best(&twin, inputs, 1));
                    d = d.min(best(&dynamic, inputs, 1));
                }
                // A new shape: warm at the other set's shape, then one run at this one.
                best(&dynamic, other, 3);
                first = first.min(best(&dynamic, inputs, 1));
                steady = steady.min(best(&dynamic, inputs, repeat));
            }
            let shape = format!("{:?}", inputs[0].shape());
            let ratio = d.as_secs_f64() / f.as_secs_f64();
            ratios.push(ratio);
            println!(
                "{name:<22} {shape:>14} {:>10.3} {:>10.3} {ratio:>7.3} {:>10.3} {:>8.2}",
                ms(f),
                ms(d),
                ms(first),
                first.as_secs_f64() / steady.as_secs_f64()
            );
        }
    }
    if !ratios.is_empty() {
        let geo = (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp();
        let worst = ratios.iter().cloned().fold(0.0f64, f64::max);
        println!("dynamic / fixed: geometric mean {geo:.3}, worst {worst:.3} (goal <= 1.05)");
    }
}

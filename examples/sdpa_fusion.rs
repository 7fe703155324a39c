//! Attention fusion end to end: the README's main job.
//!
//! With no argument, builds a GPT-style model in Rust (random weights; 12 heads of 64,
//! sequence 512, two layers); with a path, loads that ONNX model (and runs it on its
//! `test_data_set_0` inputs when there are some). Then it fuses every attention block
//! into one `scaled_dot_product_attention` node and prints: the sites found, the program
//! around one site before and after, and the model run three ways — unfused (reference
//! kernels), attention fused (the flash-style kernel), attention fused plus generated
//! kernels (the rules of [`generated_kernel_rules`], then the default stack, whose tile
//! executor runs the remaining elementwise chains as one node each) — with the max
//! difference to the unfused outputs, the time (best of a few runs) and the peak live
//! memory of each.
//!
//! `--save DIR` also writes what `benches/ort_compare.py` needs to run the same model in
//! onnxruntime: `DIR/model.onnx` (the unfused model), `DIR/input_<i>.npy`,
//! `DIR/output_<i>.npy` (graphrw's unfused outputs) and `DIR/graphrw_times.json`; and the
//! same inputs and outputs as an ONNX test set, `DIR/test_data_set_0/{input,output}_<i>.pb`,
//! so that `graphrw run DIR --profile` and `benches/ort_profile.py DIR` take the folder.
//!
//! ```sh
//! cargo run --release --example sdpa_fusion
//! cargo run --release --example sdpa_fusion -- ../shared/corpus/llama_sdpa/model.onnx
//! cargo run --release --example sdpa_fusion -- --save /tmp/sdpa_ort
//! ```

use std::collections::BTreeSet;
use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use graphrw::exec::{default_stack, plan, Executor, FusedCpu, ReferenceCpu, RunReport};
use graphrw::printer::{node_line, Names};
use graphrw::rewrite::Rewriter;
use graphrw::{
    onnx, rules, verify, Builder, DType, Graph, NodeId, RuleSet, Shape, Tensor, TensorMeta, Var,
};

/// Runs of each configuration; the best time is reported. The first run of a plan also
/// packs its weights (as onnxruntime does when it creates a session), so a few more
/// runs than that.
const REPEATS: usize = 5;

/// A small deterministic generator for weights and inputs (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next_f32(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let bits = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
        bits as f32 / (1u64 << 24) as f32 - 0.5
    }

    fn tensor(&mut self, shape: &[usize], scale: f32) -> Tensor {
        let n = shape.iter().product();
        let data = (0..n).map(|_| self.next_f32() * scale).collect();
        Tensor::from_vec(shape.to_vec(), data).expect("shape and data agree")
    }
}

const HEADS: usize = 12;
const HEAD_DIM: usize = 64;
const HIDDEN: usize = HEADS * HEAD_DIM;
const SEQ: usize = 512;
const LAYERS: usize = 2;

/// `[1, s, h*d]` to `[1, h, s, d]`.
fn split_heads(t: Var<'_>) -> Result<Var<'_>, graphrw::GraphError> {
    t.reshape(&[1, SEQ as i64, HEADS as i64, HEAD_DIM as i64])?
        .transpose(1, 2)
}

/// One GPT-2 block written the way the model code reads (linear layers with biases,
/// eager attention with an additive causal mask of large negatives, as `transformers`
/// builds it).
fn block<'b>(
    b: &'b Builder,
    x: Var<'b>,
    mask: Var<'b>,
    rng: &mut Rng,
) -> Result<Var<'b>, graphrw::GraphError> {
    let w = |rng: &mut Rng, shape: &[usize]| b.constant(rng.tensor(shape, 0.08));
    let ln1 = x.layer_norm(Some(w(rng, &[HIDDEN])), Some(w(rng, &[HIDDEN])))?;
    let qkv = ln1
        .matmul(w(rng, &[HIDDEN, 3 * HIDDEN]))?
        .add(w(rng, &[3 * HIDDEN]))?
        .split_with(&[HIDDEN as i64; 3], -1)?;
    let (q, k, v) = (
        split_heads(qkv[0])?,
        split_heads(qkv[1])?,
        split_heads(qkv[2])?,
    );
    let scores = q
        .matmul(k.transpose(-2, -1)?)?
        .div((HEAD_DIM as f64).sqrt())?
        .add(mask)?;
    let attn = scores.softmax(-1)?.matmul(v)?;
    let merged = attn
        .transpose(1, 2)?
        .reshape(&[1, SEQ as i64, HIDDEN as i64])?;
    let h = merged
        .matmul(w(rng, &[HIDDEN, HIDDEN]))?
        .add(w(rng, &[HIDDEN]))?
        .add(x)?;
    let ln2 = h.layer_norm(Some(w(rng, &[HIDDEN])), Some(w(rng, &[HIDDEN])))?;
    let mlp = ln2
        .matmul(w(rng, &[HIDDEN, 4 * HIDDEN]))?
        .add(w(rng, &[4 * HIDDEN]))?
        .gelu_with("tanh")?
        .matmul(w(rng, &[4 * HIDDEN, HIDDEN]))?
        .add(w(rng, &[HIDDEN]))?;
    mlp.add(h)
}

/// The embedded default: a two-layer GPT-style model and one input.
fn gpt_model() -> Result<(Graph, Vec<Tensor>), Box<dyn Error>> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let b = Builder::new();
    let x = b.input(
        "hidden_states",
        TensorMeta::new(DType::F32, Shape::known(&[1, SEQ as u64, HIDDEN as u64])),
    );
    let mut causal = vec![0f32; SEQ * SEQ];
    for i in 0..SEQ {
        for j in i + 1..SEQ {
            causal[i * SEQ + j] = f32::MIN;
        }
    }
    let mask = b.constant(Tensor::from_vec(vec![1, 1, SEQ, SEQ], causal)?);
    let mut h = x;
    for _ in 0..LAYERS {
        h = block(&b, h, mask, &mut rng)?;
    }
    b.output(&[h])?;
    Ok((b.finish(), vec![rng.tensor(&[1, SEQ, HIDDEN], 2.0)]))
}

/// An ONNX model and its test inputs (or zeros of the declared shapes).
fn onnx_model(path: &Path) -> Result<(Graph, Vec<Tensor>), Box<dyn Error>> {
    let g = onnx::load(path)?;
    let data = path
        .parent()
        .unwrap_or(Path::new("."))
        .join("test_data_set_0");
    let mut inputs = Vec::new();
    for (i, &id) in g.inputs().iter().enumerate() {
        let file = data.join(format!("input_{i}.pb"));
        if file.exists() {
            inputs.push(onnx::read_tensor_pb(&file)?.1);
        } else {
            let meta = &g.node(id).ok_or("input node")?.outputs()[0];
            let shape: Vec<usize> = meta
                .shape
                .as_known()
                .ok_or("symbolic input shape: give test data")?
                .iter()
                .map(|&d| d as usize)
                .collect();
            inputs.push(Tensor::zeros(meta.dtype, &shape));
        }
    }
    Ok((g, inputs))
}

/// The program lines of `ids` and the nodes feeding them, in print order.
fn excerpt(g: &Graph, ids: &BTreeSet<NodeId>) -> String {
    let names = Names::new(g);
    names
        .order()
        .iter()
        .filter(|id| ids.contains(id))
        .map(|&id| format!("    {}\n", node_line(g, &names, id)))
        .collect()
}

/// The softmax of the first attention site and the few nodes before and after it.
fn around_first_site(g: &Graph, anchor_op: &str) -> BTreeSet<NodeId> {
    let Some(site) = g.nodes_with_op(anchor_op).next() else {
        return BTreeSet::new();
    };
    let mut set = BTreeSet::from([site]);
    let mut frontier = vec![site];
    for _ in 0..3 {
        let mut next = Vec::new();
        for n in frontier {
            if let Some(node) = g.node(n) {
                for v in node.operands() {
                    if g.node(v.node).is_some_and(|p| !p.op().is_source_leaf())
                        && set.insert(v.node)
                    {
                        next.push(v.node);
                    }
                }
            }
        }
        frontier = next;
    }
    for c in g.node_users(site) {
        set.insert(c);
    }
    set
}

/// The rules that put generated fused kernels in place of the chains they implement,
/// run after attention fusion for the third configuration: the built-in `fused_kernel!`
/// definitions of `graphrw::generated::builtin` (GELU forms, SwiGLU, norms, softmax, ...).
fn generated_kernel_rules() -> Vec<&'static RuleSet> {
    graphrw::generated::builtin_rules()
}

/// The stack without the tile executor: the fused attention kernel, then the reference
/// kernels.
fn attention_stack() -> Vec<Arc<dyn Executor>> {
    vec![Arc::new(FusedCpu), Arc::new(ReferenceCpu)]
}

/// Plans `g` on `stack` and runs it `REPEATS` times; the outputs and the report of the
/// fastest run.
fn run(
    g: &Graph,
    stack: &[Arc<dyn Executor>],
    inputs: &[Tensor],
) -> Result<(Vec<Tensor>, RunReport), Box<dyn Error>> {
    // The kernels' options from the `GRAPHRW_*` variables (`GRAPHRW_ISA=avx2` caps the
    // packed GEMM and the other kernels at AVX2+FMA on an AVX-512 CPU, say).
    let options = graphrw_kernels::options::vars::from_vars(|k| std::env::var(k).ok())?;
    let p = graphrw::exec::plan_with(g, stack, options)?;
    let mut best: Option<(Vec<Tensor>, RunReport)> = None;
    for _ in 0..REPEATS {
        let (out, report) = p.run(inputs)?;
        // The outputs not kept go back to the plan, which draws the next run's on them.
        if best.as_ref().is_none_or(|b| report.total < b.1.total) {
            if let Some((old, _)) = best.replace((out, report)) {
                p.recycle(old);
            }
        } else {
            p.recycle(out);
        }
    }
    best.ok_or_else(|| "no run".into())
}

/// The largest `|a - b|` over all outputs; infinite where one side has a NaN or an
/// infinity the other lacks, or the shapes differ (a NaN difference is not hidden).
fn max_diff(a: &[Tensor], b: &[Tensor]) -> f64 {
    graphrw::kernels::testing::compare::max_abs_diff_tensors(a, b).unwrap_or(f64::INFINITY)
}

/// Writes `t` as a `.npy` file (bf16 as f32, which numpy lacks).
fn write_npy(path: &Path, t: &Tensor) -> Result<(), Box<dyn Error>> {
    let t = if t.dtype() == DType::BF16 {
        t.cast(DType::F32)
    } else {
        t.clone()
    };
    let descr = match t.dtype() {
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::F16 => "<f2",
        DType::I64 => "<i8",
        DType::I32 => "<i4",
        DType::Bool => "|b1",
        DType::U8 => "|u1",
        DType::I8 => "|i1",
        DType::I16 => "<i2",
        DType::U16 => "<u2",
        DType::U32 => "<u4",
        DType::U64 => "<u8",
        DType::BF16 => unreachable!("converted above"),
    };
    let shape: String = t.shape().iter().map(|d| format!("{d}, ")).collect();
    let mut header =
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({shape}), }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(&t.to_raw_bytes());
    std::fs::write(path, bytes)?;
    Ok(())
}

struct Args {
    model: Option<String>,
    save: Option<PathBuf>,
}

fn args() -> Result<Args, Box<dyn Error>> {
    let mut out = Args {
        model: None,
        save: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        if a == "--save" {
            out.save = Some(it.next().ok_or("--save needs a folder")?.into());
        } else if a.starts_with("--") {
            return Err(format!(
                "unknown option {a} (usage: sdpa_fusion [MODEL.onnx] [--save DIR])"
            )
            .into());
        } else {
            out.model = Some(a);
        }
    }
    Ok(out)
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = args()?;
    let (unfused, inputs) = match &args.model {
        Some(path) => onnx_model(Path::new(path))?,
        None => gpt_model()?,
    };
    verify(&unfused)?;
    println!(
        "model: {}",
        args.model
            .as_deref()
            .unwrap_or("embedded GPT-style (2 layers, 12 heads x 64, seq 512)")
    );
    println!(
        "{} nodes; {} softmax nodes",
        unfused.node_count(),
        unfused.nodes_with_op("softmax").count()
    );

    let mut fused = unfused.clone();
    let reports = rules::fuse_attention(&mut fused)?;
    verify(&fused)?;
    let sites = fused.nodes_with_op("scaled_dot_product_attention").count();
    println!(
        "\nattention sites fused: {sites} ({} softmax left)",
        fused.nodes_with_op("softmax").count()
    );
    for (pass, r) in ["canonicalise", "fuse attention"].iter().zip(&reports) {
        print!("  {pass}: {r}");
    }
    let causal = rules::causal::mark_causal(&mut fused)?;
    println!(
        "  causal masks: {} of {sites} attention node(s) made `is_causal` ({} kept a padding mask)",
        causal.converted, causal.with_remainder
    );

    println!(
        "\nbefore, around the first site:\n{}",
        excerpt(&unfused, &around_first_site(&unfused, "softmax"))
    );
    println!(
        "after:\n{}",
        excerpt(
            &fused,
            &around_first_site(&fused, "scaled_dot_product_attention")
        )
    );

    let mut generated = fused.clone();
    let kernel_rules = generated_kernel_rules();
    if !kernel_rules.is_empty() {
        let r = Rewriter::new(&kernel_rules).run(&mut generated)?;
        print!("  generated kernels: {r}");
        verify(&generated)?;
    }
    let generated_plan = plan(&generated, &default_stack())?;
    let groups = generated_plan
        .graph()
        .nodes_with_op("fused.elementwise_group")
        .count();
    println!(
        "generated kernels: {} rule sets; tile executor groups: {groups}",
        kernel_rules.len()
    );

    let (a, ra) = run(&unfused, &attention_stack(), &inputs)?;
    let (b, rb) = run(&fused, &attention_stack(), &inputs)?;
    let (c, rc) = run(&generated, &default_stack(), &inputs)?;
    println!("\nbest of {REPEATS} runs each:");
    let ms = |r: &RunReport| r.total.as_secs_f64() * 1e3;
    let mib = |r: &RunReport| r.peak_live_bytes as f64 / (1 << 20) as f64;
    for (what, r, diff) in [
        ("unfused", &ra, 0.0),
        ("attention fused", &rb, max_diff(&a, &b)),
        ("attention + generated", &rc, max_diff(&a, &c)),
    ] {
        println!(
            "  {what:<22} {:8.2} ms ({:4.2}x)   peak live {:8.1} MiB   max |diff| vs unfused {diff:.2e}",
            ms(r),
            ms(&ra) / ms(r),
            mib(r),
        );
    }

    if let Some(dir) = &args.save {
        std::fs::create_dir_all(dir)?;
        onnx::save(&unfused, dir.join("model.onnx"))?;
        for (i, t) in inputs.iter().enumerate() {
            write_npy(&dir.join(format!("input_{i}.npy")), t)?;
        }
        for (i, t) in a.iter().enumerate() {
            write_npy(&dir.join(format!("output_{i}.npy")), t)?;
        }
        let names: Vec<String> = unfused
            .inputs()
            .iter()
            .map(|&id| {
                unfused
                    .node(id)
                    .and_then(|n| n.name())
                    .unwrap_or("")
                    .to_string()
            })
            .collect();
        // The same inputs and outputs as an ONNX test set, for `graphrw run DIR` (and
        // `--profile`) and `benches/ort_profile.py DIR`.
        let set = dir.join("test_data_set_0");
        std::fs::create_dir_all(&set)?;
        for (i, (t, name)) in inputs.iter().zip(&names).enumerate() {
            onnx::write_tensor_pb(set.join(format!("input_{i}.pb")), name, t)?;
        }
        for (i, t) in a.iter().enumerate() {
            onnx::write_tensor_pb(
                set.join(format!("output_{i}.pb")),
                &format!("output_{i}"),
                t,
            )?;
        }
        let json = format!(
            "{{\"input_names\": {names:?}, \"repeats\": {REPEATS}, \"unfused_ms\": {:.3}, \"attention_ms\": {:.3}, \"generated_ms\": {:.3}, \"unfused_peak_mib\": {:.1}, \"attention_peak_mib\": {:.1}, \"generated_peak_mib\": {:.1}}}\n",
            ms(&ra), ms(&rb), ms(&rc), mib(&ra), mib(&rb), mib(&rc)
        );
        std::fs::write(dir.join("graphrw_times.json"), json)?;
        println!(
            "\nsaved the model, inputs, outputs and times in {}",
            dir.display()
        );
    }
    Ok(())
}

//! Attention fusion end to end: the README's main job.
//!
//! With no argument, builds a GPT-style model in Rust (random weights; 12 heads of 64,
//! sequence 512, two layers); with a path, loads that ONNX model (and runs it on its
//! `test_data_set_0` inputs when there are some). Then it fuses every attention block
//! into one `scaled_dot_product_attention` node and prints: the sites found, the program
//! around one site before and after, the max difference between the unfused and fused
//! outputs, and the time and peak live memory of both runs.
//!
//! ```sh
//! cargo run --release --example sdpa_fusion
//! cargo run --release --example sdpa_fusion -- ../shared/corpus/llama_sdpa/model.onnx
//! ```

use std::collections::BTreeSet;
use std::error::Error;
use std::path::Path;

use graphrw::exec::{default_stack, plan, RunReport};
use graphrw::printer::{node_line, Names};
use graphrw::{onnx, rules, verify, Builder, DType, Graph, NodeId, Shape, Tensor, TensorMeta, Var};

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

/// One GPT-2 block written the way the model code reads (eager attention with an
/// additive causal mask of large negatives, as `transformers` builds it).
fn block<'b>(
    b: &'b Builder,
    x: Var<'b>,
    mask: Var<'b>,
    rng: &mut Rng,
) -> Result<Var<'b>, graphrw::GraphError> {
    let w = |rng: &mut Rng, shape: &[usize]| b.constant(rng.tensor(shape, 0.08));
    let ln1 = x.layer_norm(Some(w(rng, &[HIDDEN])), Some(w(rng, &[HIDDEN])), -1, 1e-5)?;
    let qkv = ln1
        .matmul(w(rng, &[HIDDEN, 3 * HIDDEN]))?
        .split(&[HIDDEN as i64; 3], -1)?;
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
    let h = merged.matmul(w(rng, &[HIDDEN, HIDDEN]))?.add(x)?;
    let ln2 = h.layer_norm(Some(w(rng, &[HIDDEN])), Some(w(rng, &[HIDDEN])), -1, 1e-5)?;
    let mlp = ln2
        .matmul(w(rng, &[HIDDEN, 4 * HIDDEN]))?
        .gelu("tanh")?
        .matmul(w(rng, &[4 * HIDDEN, HIDDEN]))?;
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
    for c in g.consumers(site) {
        set.insert(c);
    }
    set
}

/// Runs `g` on the default CPU stack (fused kernels first, reference kernels after).
fn run(g: &Graph, inputs: &[Tensor]) -> Result<(Vec<Tensor>, RunReport), Box<dyn Error>> {
    Ok(plan(g, &default_stack())?.run(inputs)?)
}

fn main() -> Result<(), Box<dyn Error>> {
    let arg = std::env::args().nth(1);
    let (unfused, inputs) = match &arg {
        Some(path) => onnx_model(Path::new(path))?,
        None => gpt_model()?,
    };
    verify(&unfused)?;
    println!(
        "model: {}",
        arg.as_deref()
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

    let (a, ra) = run(&unfused, &inputs)?;
    let (b, rb) = run(&fused, &inputs)?;
    let max_diff = a
        .iter()
        .zip(&b)
        .flat_map(|(x, y)| x.to_f64_vec().into_iter().zip(y.to_f64_vec()))
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f64, f64::max);
    println!("max |unfused - fused| over the outputs: {max_diff:e}");
    println!(
        "unfused: {:8.2} ms, peak live {:8.1} MiB",
        ra.total.as_secs_f64() * 1e3,
        ra.peak_live_bytes as f64 / (1 << 20) as f64
    );
    println!(
        "fused:   {:8.2} ms, peak live {:8.1} MiB",
        rb.total.as_secs_f64() * 1e3,
        rb.peak_live_bytes as f64 / (1 << 20) as f64
    );
    Ok(())
}

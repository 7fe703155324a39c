//! The matmul epilogue on graphs with symbolic batch and sequence dims, as dynamic ONNX
//! exports have them: the bias, the head split of the attention inputs and the residual
//! fold into the products exactly as they do when every dim is known, and the plan gives
//! the reference stack's results at shapes of both kinds.

use std::sync::Arc;

use graphrw::exec::{plan, reference_stack, EpilogueCpu, Executor, ReferenceCpu};
use graphrw::meta::SymExpr;
use graphrw::ops::builtin::RESHAPE;
use graphrw::ops::AttrValue;
use graphrw::{verify, Builder, DType, Dim, Graph, Shape, Tensor, TensorMeta, Var};
use graphrw_kernels::testing::compare::{assert_close_tensor, Tol};

const HEADS: usize = 2;
const HEAD_DIM: usize = 4;
const WIDTH: usize = HEADS * HEAD_DIM;

fn epilogue_stack() -> Vec<Arc<dyn Executor>> {
    vec![Arc::new(EpilogueCpu::default()), Arc::new(ReferenceCpu)]
}

fn ramp(shape: &[usize], seed: usize) -> Tensor {
    let n: usize = shape.iter().product();
    let vals: Vec<f64> = (0..n)
        .map(|i| (((i + seed * 13) * 7919) % 1000) as f64 / 400.0 - 1.25)
        .collect();
    Tensor::from_f64_slice(DType::F32, shape, &vals).unwrap()
}

/// The dims of the block's input: `[batch, seq, WIDTH]`, or known sizes.
#[derive(Clone, Copy)]
enum Dims {
    Symbolic,
    Known(usize, usize),
}

impl Dims {
    fn lead(self) -> [Dim; 2] {
        match self {
            Dims::Symbolic => [Dim::sym("batch"), Dim::sym("seq")],
            Dims::Known(b, s) => [Dim::from(b), Dim::from(s)],
        }
    }
}

/// `reshape(x, [batch, seq, rest..])` with the batch and sequence of `dims`.
fn reshape<'b>(b: &'b Builder, x: Var<'b>, dims: Dims, rest: &[usize]) -> Var<'b> {
    let mut shape: Vec<SymExpr> = dims.lead().iter().map(Dim::to_expr).collect();
    shape.extend(rest.iter().map(|&n| SymExpr::int(n as i64)));
    let out = b
        .apply(
            &RESHAPE,
            &[x.value()],
            &[("shape", AttrValue::sym_ints(shape))],
        )
        .unwrap();
    b.var(out[0])
}

/// One attention block as exporters write it: the fused QKV projection, split into q,
/// k and v, each reshaped to `[batch, seq, H, D]` and swapped to `[batch, H, S, D]`
/// (k by `permute`), `softmax(q kᵀ) v` merged back to `[batch, seq, WIDTH]`, the output
/// projection and the residual.
fn attention_block(dims: Dims) -> Graph {
    let b = Builder::new();
    let [batch, seq] = dims.lead();
    let x = b.input(
        "x",
        TensorMeta::new(
            DType::F32,
            [batch, seq, Dim::from(WIDTH)]
                .into_iter()
                .collect::<Shape>(),
        ),
    );
    let w_qkv = b.constant(ramp(&[WIDTH, 3 * WIDTH], 1));
    let b_qkv = b.constant(ramp(&[3 * WIDTH], 2));
    let w_out = b.constant(ramp(&[WIDTH, WIDTH], 3));
    let b_out = b.constant(ramp(&[WIDTH], 4));
    let qkv = x.matmul(w_qkv).unwrap().add(b_qkv).unwrap();
    let w = WIDTH as i64;
    let parts = qkv.split_with(&[w, w, w], -1).unwrap();
    let heads = |v| reshape(&b, v, dims, &[HEADS, HEAD_DIM]);
    let q = heads(parts[0]).transpose(1, 2).unwrap();
    let k = heads(parts[1]).permute(&[0, 2, 1, 3]).unwrap();
    let v = heads(parts[2]).transpose(1, 2).unwrap();
    let scores = q.matmul(k.transpose(-2, -1).unwrap()).unwrap();
    let p = scores.mul(0.25).unwrap().softmax(-1).unwrap();
    let merged = p.matmul(v).unwrap().transpose(1, 2).unwrap();
    let merged = reshape(&b, merged, dims, &[WIDTH]);
    let y = merged
        .matmul(w_out)
        .unwrap()
        .add(b_out)
        .unwrap()
        .add(x)
        .unwrap();
    b.output(&[y]).unwrap();
    b.finish()
}

#[test]
fn symbolic_blocks_fuse_as_known_ones_do() {
    let known = plan(&attention_block(Dims::Known(3, 11)), &epilogue_stack()).unwrap();
    let symbolic = plan(&attention_block(Dims::Symbolic), &epilogue_stack()).unwrap();
    verify(symbolic.graph()).unwrap();
    let counts = symbolic.graph().op_counts();
    assert_eq!(counts, known.graph().op_counts(), "{symbolic}\n{known}");
    // The QKV product in three head-major pieces and the output projection with its
    // residual: no bias add, split or head-split reshape is left.
    assert_eq!(counts.get("fused.matmul_epilogue"), Some(&4), "{symbolic}");
    for gone in ["add", "split", "permute"] {
        assert!(!counts.contains_key(gone), "{gone} left\n{symbolic}");
    }
    assert_eq!(
        counts.get("reshape"),
        Some(&1),
        "only the merge\n{symbolic}"
    );
}

#[test]
fn symbolic_blocks_give_the_reference_results_at_every_shape() {
    let g = attention_block(Dims::Symbolic);
    let fused = plan(&g, &epilogue_stack()).unwrap();
    let reference = plan(&g, &reference_stack()).unwrap();
    // The fused nodes' decomposition, with the symbolic head split, where no executor
    // takes them.
    let decomposed = plan(fused.graph(), &reference_stack()).unwrap();
    for (batch, seq) in [(3, 11), (1, 40), (2, 1)] {
        let x = ramp(&[batch, seq, WIDTH], 7);
        let (want, _) = reference.run(std::slice::from_ref(&x)).unwrap();
        for (name, p) in [("fused", &fused), ("decomposed", &decomposed)] {
            let (got, _) = p.run(std::slice::from_ref(&x)).unwrap();
            assert_eq!(got[0].shape(), &[batch, seq, WIDTH]);
            let what = format!("{name} at [{batch}, {seq}]");
            assert_close_tensor(&got[0], &want[0], Tol::new(1e-4, 1e-5), &what);
        }
    }
}

/// A language model's head on a tied embedding with symbolic batch and sequence:
/// `x @ transpose(e)` for a constant `e` of `[VOCAB, WIDTH]`.
fn tied_head(dims: Dims) -> Graph {
    const VOCAB: usize = 40;
    let b = Builder::new();
    let [batch, seq] = dims.lead();
    let x = b.input(
        "x",
        TensorMeta::new(
            DType::F32,
            [batch, seq, Dim::from(WIDTH)]
                .into_iter()
                .collect::<Shape>(),
        ),
    );
    let e = b.constant(ramp(&[VOCAB, WIDTH], 5));
    let y = x.matmul(e.transpose(0, 1).unwrap()).unwrap();
    b.output(&[y]).unwrap();
    b.finish()
}

/// The head folds its transpose with symbolic rows as with known ones, and gives the
/// reference stack's results at every shape, fused and decomposed.
#[test]
fn a_symbolic_head_on_a_transposed_weight_folds_its_transpose() {
    let known = plan(&tied_head(Dims::Known(3, 11)), &epilogue_stack()).unwrap();
    let g = tied_head(Dims::Symbolic);
    let fused = plan(&g, &epilogue_stack()).unwrap();
    verify(fused.graph()).unwrap();
    let counts = fused.graph().op_counts();
    assert_eq!(counts, known.graph().op_counts(), "{fused}\n{known}");
    assert_eq!(counts.get("fused.matmul_epilogue"), Some(&1), "{fused}");
    assert!(!counts.contains_key("transpose"), "{fused}");
    let reference = plan(&g, &reference_stack()).unwrap();
    let decomposed = plan(fused.graph(), &reference_stack()).unwrap();
    for (batch, seq) in [(3, 11), (1, 70), (2, 1)] {
        let x = ramp(&[batch, seq, WIDTH], 7);
        let (want, _) = reference.run(std::slice::from_ref(&x)).unwrap();
        for (name, p) in [("fused", &fused), ("decomposed", &decomposed)] {
            for run in 0..2 {
                let (got, _) = p.run(std::slice::from_ref(&x)).unwrap();
                assert_eq!(got[0].shape(), &[batch, seq, 40]);
                let what = format!("{name} at [{batch}, {seq}], run {run}");
                assert_close_tensor(&got[0], &want[0], Tol::new(1e-4, 1e-5), &what);
            }
        }
    }
}

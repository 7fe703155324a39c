//! The matmul epilogue executor: matmul + column bias (+ activation) chains become one
//! `fused.matmul_epilogue` node in the plan, give the reference stack's outputs, and
//! chains it must not take (a product used twice, a bias that broadcasts rows, a graph
//! output in the middle) are left alone.

use std::sync::Arc;

use graphrw::exec::{
    default_stack, plan, plan_with, reference_stack, EpilogueCpu, Executor, ReferenceCpu,
    EPILOGUE_CPU, MATMUL_EPILOGUE,
};
use graphrw::{verify, Builder, DType, Dim, Graph, Shape, Tensor, TensorMeta, Var};
use graphrw_kernels::cpu::choice::{ProductChoice, ProductKernel};
use graphrw_kernels::testing::compare::{assert_close_tensor, max_abs_diff_tensor, Tol};
use graphrw_kernels::{cpu::Isa, KernelOptions};

fn epilogue_stack() -> Vec<Arc<dyn Executor>> {
    vec![Arc::new(EpilogueCpu::default()), Arc::new(ReferenceCpu)]
}

fn ramp(dt: DType, shape: &[usize], seed: usize) -> Tensor {
    let n: usize = shape.iter().product();
    let vals: Vec<f64> = (0..n)
        .map(|i| (((i + seed * 13) * 7919) % 1000) as f64 / 400.0 - 1.25)
        .collect();
    // Rounded to bf16 first, so the graph of every dtype holds the same numbers.
    let vals = Tensor::from_f64_slice(DType::BF16, shape, &vals)
        .unwrap()
        .to_f64_vec();
    Tensor::from_f64_slice(dt, shape, &vals).unwrap()
}

/// The operands of a projection: input `x` of `shape` and a constant weight `[k, n]`
/// (`k` the input's last dim) and bias `[n]` (ramps of seeds 1 and 2).
#[derive(Clone, Copy)]
struct Projection<'b> {
    x: Var<'b>,
    w: Var<'b>,
    bias: Var<'b>,
}

impl<'b> Projection<'b> {
    fn new(b: &'b Builder, dt: DType, shape: &[usize], n: usize) -> Projection<'b> {
        let k = shape[shape.len() - 1];
        Projection {
            x: b.input(
                "x",
                TensorMeta::new(dt, shape.iter().map(|&d| Dim::from(d)).collect::<Shape>()),
            ),
            w: b.constant(ramp(dt, &[k, n], 1)),
            bias: b.constant(ramp(dt, &[n], 2)),
        }
    }

    /// `x @ w + bias`, a new product at each call.
    fn out(&self) -> Var<'b> {
        self.x.matmul(self.w).unwrap().add(self.bias).unwrap()
    }
}

/// The largest difference from `exact` of each of `a` and `b` (panics where either is
/// NaN or infinite where `exact` is not, or has another shape).
#[track_caller]
fn errors(exact: &Tensor, a: &Tensor, b: &Tensor) -> (f64, f64) {
    let err = |t: &Tensor| max_abs_diff_tensor(t, exact).unwrap_or_else(|e| panic!("{e}"));
    (err(a), err(b))
}

/// Plans `g` on `stack` and on the reference stack; the outputs agree within the
/// dtype's tolerance. Returns how many fused epilogue nodes the plan has.
fn check_against_reference(
    g: &Graph,
    stack: &[Arc<dyn Executor>],
    inputs: &[Tensor],
    dt: DType,
) -> usize {
    verify(g).unwrap();
    let (want, _) = plan(g, &reference_stack()).unwrap().run(inputs).unwrap();
    let p = plan(g, stack).unwrap();
    verify(p.graph()).unwrap();
    let (got, _) = p.run(inputs).unwrap();
    let (atol, rtol) = match dt {
        DType::F16 | DType::BF16 => (0.05, 3e-2),
        DType::F32 => (1e-4, 1e-5),
        _ => (1e-10, 1e-12),
    };
    assert_eq!(want.len(), got.len());
    for (i, (w, o)) in want.iter().zip(&got).enumerate() {
        assert_eq!(w.dtype(), o.dtype(), "output {i}");
        assert_close_tensor(o, w, Tol::new(atol, rtol), &format!("output {i}\n{p}"));
    }
    let fused = p.assignments().filter(|&(_, e)| e == EPILOGUE_CPU).count();
    assert_eq!(
        fused,
        p.graph()
            .op_counts()
            .get(MATMUL_EPILOGUE.name)
            .copied()
            .unwrap_or(0),
        "every fused node runs on the epilogue executor\n{p}"
    );
    fused
}

/// An MLP: `gelu(x @ w1 + b1) @ w2 + b2`, then `relu(. @ w3 + b3)`.
fn mlp(dt: DType, rows: usize, k: usize, hidden: usize, gelu: &str) -> (Graph, Vec<Tensor>) {
    let b = Builder::new();
    let x = b.input("x", TensorMeta::new(dt, [2usize, rows, k]));
    let w1 = b.constant(ramp(dt, &[k, hidden], 1));
    let b1 = b.constant(ramp(dt, &[hidden], 2));
    let w2 = b.constant(ramp(dt, &[hidden, k], 3));
    let b2 = b.constant(ramp(dt, &[1, k], 4));
    let w3 = b.constant(ramp(dt, &[k, 5], 5));
    let b3 = b.constant(ramp(dt, &[5], 6));
    let h = x
        .matmul(w1)
        .unwrap()
        .add(b1)
        .unwrap()
        .gelu_with(gelu)
        .unwrap();
    let y = h.matmul(w2).unwrap().add(b2).unwrap();
    let z = y.matmul(w3).unwrap().add(b3).unwrap().relu().unwrap();
    b.output(&[z]).unwrap();
    (b.finish(), vec![ramp(dt, &[2, rows, k], 7)])
}

#[test]
fn half_precision_chains_are_as_accurate_as_the_unfused_graph() {
    // Three chained products in f16/bf16 drift from the exact result by the roundings
    // of each op; the fused plan (one rounding per chain) must not drift further than
    // the reference plan does (against the same graph computed in f64).
    for dt in [DType::F16, DType::BF16] {
        for (rows, k, hidden) in [(3, 7, 9), (17, 33, 65)] {
            let (g, inputs) = mlp(dt, rows, k, hidden, "tanh");
            let (g64, inputs64) = mlp(DType::F64, rows, k, hidden, "tanh");
            let (exact, _) = plan(&g64, &reference_stack())
                .unwrap()
                .run(&inputs64)
                .unwrap();
            let (unfused, _) = plan(&g, &reference_stack()).unwrap().run(&inputs).unwrap();
            let p = plan(&g, &epilogue_stack()).unwrap();
            assert_eq!(
                p.assignments().filter(|&(_, e)| e == EPILOGUE_CPU).count(),
                3
            );
            let (fused, _) = p.run(&inputs).unwrap();
            let (ef, eu) = errors(&exact[0], &fused[0], &unfused[0]);
            assert!(
                ef <= 1.5 * eu + 1e-3,
                "{dt} {rows}x{k}x{hidden}: fused {ef}, unfused {eu}"
            );
        }
    }
}

#[test]
fn mlp_chains_fuse_and_match_the_reference() {
    for dt in [DType::F32, DType::F64] {
        for (rows, k, hidden) in [(1, 1, 1), (3, 7, 9), (17, 33, 65)] {
            for gelu in ["none", "tanh"] {
                let (g, inputs) = mlp(dt, rows, k, hidden, gelu);
                let fused = check_against_reference(&g, &epilogue_stack(), &inputs, dt);
                assert_eq!(fused, 3, "{dt} {rows}x{k}x{hidden} gelu={gelu}");
                let fused = check_against_reference(&g, &default_stack(), &inputs, dt);
                assert_eq!(fused, 3, "default stack, {dt} {rows}x{k}x{hidden}");
            }
        }
    }
}

#[test]
fn chains_it_must_not_take_are_left_alone() {
    let dt = DType::F32;
    let b = Builder::new();
    let x = b.input("x", TensorMeta::new(dt, [4usize, 6]));
    let w = b.constant(ramp(dt, &[6, 3], 1));
    // A product used twice: fusing would lose the plain product.
    let p = x.matmul(w).unwrap();
    let used_twice = p.add(b.constant(ramp(dt, &[3], 2))).unwrap();
    let other = p.mul(2.0).unwrap();
    // A bias along the rows (broadcasts over columns): not a column bias.
    let rows_bias = x
        .matmul(w)
        .unwrap()
        .add(b.constant(ramp(dt, &[4, 1], 3)))
        .unwrap();
    // The sum is a graph output and also feeds a relu: the chain stops at the add.
    let q = x
        .matmul(w)
        .unwrap()
        .add(b.constant(ramp(dt, &[3], 4)))
        .unwrap();
    let r = q.relu().unwrap();
    b.output(&[used_twice, other, rows_bias, q, r]).unwrap();
    let g = b.finish();
    let inputs = vec![ramp(dt, &[4, 6], 9)];
    let fused = check_against_reference(&g, &epilogue_stack(), &inputs, dt);
    // Only `q`'s add (without the relu) folds into its product; the other two products
    // run alone on the epilogue (a product by a constant weight, zero bias), their adds
    // and the relu left as they were.
    assert_eq!(fused, 3);
    let p = plan(&g, &epilogue_stack()).unwrap();
    let ops = p.graph().op_counts();
    assert_eq!(ops.get("add").copied(), Some(2), "{p}");
    assert_eq!(ops.get("relu").copied(), Some(1), "{p}");
}

/// A product by a constant weight with no bias (a language model's head) runs on the
/// epilogue too, so its weight is packed like the other layers'; a product of two
/// inputs stays a `matmul`.
#[test]
fn a_product_without_bias_runs_on_the_epilogue() {
    let dt = DType::F32;
    let rows = 70usize;
    let b = Builder::new();
    let x = b.input("x", TensorMeta::new(dt, [rows, 48]));
    let y = b.input("y", TensorMeta::new(dt, [48usize, 24]));
    let w = b.constant(ramp(dt, &[48, 100], 1));
    let head = x.matmul(w).unwrap();
    let both_inputs = x.matmul(y).unwrap();
    b.output(&[head, both_inputs]).unwrap();
    let g = b.finish();
    let inputs = vec![ramp(dt, &[rows, 48], 2), ramp(dt, &[48, 24], 3)];
    let epilogue = Arc::new(EpilogueCpu::default());
    let stack: Vec<Arc<dyn Executor>> = vec![epilogue.clone(), Arc::new(ReferenceCpu)];
    assert_eq!(check_against_reference(&g, &stack, &inputs, dt), 1);
    let rule = KernelOptions::default().with_product_kernel(ProductChoice::Rule);
    let p = plan_with(&g, &stack, rule).unwrap();
    assert_eq!(p.graph().op_counts().get("matmul").copied(), Some(1), "{p}");
    p.run(&inputs).unwrap();
    if packing_with(&rule) == Some(true) {
        assert!(
            epilogue.packed_bytes() > 0,
            "the head's weight was not packed\n{p}"
        );
    }
}

#[test]
fn the_node_decomposes_when_no_executor_takes_it() {
    // The plan's fused nodes (plain chains, column ranges, residuals, heads), planned
    // again on the reference stack alone, run through their decomposition with the
    // same result.
    for (g, inputs) in [
        mlp(DType::F32, 5, 8, 12, "tanh"),
        fused_qkv(DType::F32, 5, 8, true),
        residual_block(DType::F32, 5, 8),
        qkv_heads(DType::F32, 5, 2, 4),
    ] {
        let fused = plan(&g, &epilogue_stack()).unwrap();
        let (want, _) = fused.run(&inputs).unwrap();
        let again = plan(fused.graph(), &reference_stack()).unwrap();
        assert!(!again.graph().op_counts().contains_key(MATMUL_EPILOGUE.name));
        let (got, _) = again.run(&inputs).unwrap();
        for (a, b) in want[0].to_f64_vec().iter().zip(got[0].to_f64_vec()) {
            assert!((a - b).abs() <= 2e-5 + 1e-5 * a.abs(), "{a} vs {b}");
        }
    }
}

/// The attention input projection of GPT-2 (`c_attn`): one product with a `[k, 3k]`
/// weight, a bias, and a `split` of the result along the last dim into q, k, v, which
/// feed the rest. With `use_all` false the middle piece is never used.
fn fused_qkv(dt: DType, rows: usize, k: usize, use_all: bool) -> (Graph, Vec<Tensor>) {
    let b = Builder::new();
    let qkv = Projection::new(&b, dt, &[2, rows, k], 3 * k).out();
    let parts = qkv.split_with(&[k as i64, k as i64, k as i64], -1).unwrap();
    let (q, kk, v) = (parts[0], parts[1], parts[2]);
    let y = if use_all {
        q.mul(kk).unwrap().add(v).unwrap()
    } else {
        q.add(v).unwrap()
    };
    b.output(&[y]).unwrap();
    (b.finish(), vec![ramp(dt, &[2, rows, k], 7)])
}

/// For f16/bf16: the fused plan of `build(dt)` drifts from the f64 graph's result no
/// further than the reference plan does (one rounding per fused node against one per
/// op: the outputs differ by more than a fixed tolerance, not in accuracy). Returns
/// the fused plan's count of epilogue nodes.
fn check_half_against_exact(build: impl Fn(DType) -> (Graph, Vec<Tensor>), dt: DType) -> usize {
    let (g, inputs) = build(dt);
    let (g64, inputs64) = build(DType::F64);
    let (exact, _) = plan(&g64, &reference_stack())
        .unwrap()
        .run(&inputs64)
        .unwrap();
    let (unfused, _) = plan(&g, &reference_stack()).unwrap().run(&inputs).unwrap();
    let p = plan(&g, &epilogue_stack()).unwrap();
    verify(p.graph()).unwrap();
    let (fused, _) = p.run(&inputs).unwrap();
    let (ef, eu) = errors(&exact[0], &fused[0], &unfused[0]);
    assert!(ef <= 1.5 * eu + 1e-3, "{dt}: fused {ef}, unfused {eu}\n{p}");
    p.assignments().filter(|&(_, e)| e == EPILOGUE_CPU).count()
}

/// [`check_against_reference`] for f32/f64, [`check_half_against_exact`] for f16/bf16.
fn check_any(build: impl Fn(DType) -> (Graph, Vec<Tensor>), dt: DType) -> usize {
    match dt {
        DType::F16 | DType::BF16 => check_half_against_exact(build, dt),
        _ => {
            let (g, inputs) = build(dt);
            check_against_reference(&g, &epilogue_stack(), &inputs, dt)
        }
    }
}

#[test]
fn a_split_of_the_product_becomes_one_node_per_piece() {
    for dt in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for (rows, k) in [(1, 1), (3, 5), (17, 48)] {
            for use_all in [true, false] {
                let fused = check_any(|dt| fused_qkv(dt, rows, k, use_all), dt);
                let (g, _) = fused_qkv(dt, rows, k, use_all);
                // One node per used piece; the split itself is gone.
                let want = if use_all { 3 } else { 2 };
                assert_eq!(fused, want, "{dt} {rows}x{k} use_all={use_all}");
                let p = plan(&g, &epilogue_stack()).unwrap();
                assert!(!p.graph().op_counts().contains_key("split"), "{p}");
            }
        }
    }
}

/// `g` (f32) planned on the epilogue stack agrees with the reference stack, with
/// `fused` epilogue nodes and `count` nodes of op `kept` left as they were.
fn check_left_alone(g: &Graph, inputs: &[Tensor], fused: usize, (kept, count): (&str, usize)) {
    assert_eq!(
        check_against_reference(g, &epilogue_stack(), inputs, DType::F32),
        fused
    );
    let p = plan(g, &epilogue_stack()).unwrap();
    assert_eq!(p.graph().op_counts().get(kept), Some(&count), "{p}");
}

#[test]
fn splits_it_must_not_take_are_left_alone() {
    let dt = DType::F32;
    let b = Builder::new();
    let p = Projection::new(&b, dt, &[4, 6], 4);
    // Along the rows, not the columns: stays a split of one fused product.
    let by_rows = p.out().split(&[1, 3]).unwrap();
    // The product is also a graph output: the whole must exist.
    let kept = p.out();
    let by_cols = kept.split_with(&[1, 3], -1).unwrap();
    b.output(&[by_rows[0], by_rows[1], kept, by_cols[0], by_cols[1]])
        .unwrap();
    let inputs = vec![ramp(dt, &[4, 6], 9)];
    check_left_alone(&b.finish(), &inputs, 2, ("split", 2));
}

/// A pre-norm residual block's two projections: `h = x + (x @ w1 + b1)`, then
/// `h + (h @ w2 + b2)` with the addends in the other order.
fn residual_block(dt: DType, rows: usize, k: usize) -> (Graph, Vec<Tensor>) {
    let b = Builder::new();
    let x = b.input("x", TensorMeta::new(dt, [2usize, rows, k]));
    let w1 = b.constant(ramp(dt, &[k, k], 1));
    let b1 = b.constant(ramp(dt, &[k], 2));
    let w2 = b.constant(ramp(dt, &[k, k], 3));
    let b2 = b.constant(ramp(dt, &[1, k], 4));
    let h = x.add(x.matmul(w1).unwrap().add(b1).unwrap()).unwrap();
    let y = h.matmul(w2).unwrap().add(b2).unwrap().add(h).unwrap();
    b.output(&[y]).unwrap();
    (b.finish(), vec![ramp(dt, &[2, rows, k], 7)])
}

#[test]
fn a_residual_add_folds_into_the_product() {
    for dt in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for (rows, k) in [(1, 1), (3, 5), (17, 48)] {
            let fused = check_any(|dt| residual_block(dt, rows, k), dt);
            let (g, _) = residual_block(dt, rows, k);
            assert_eq!(fused, 2, "{dt} {rows}x{k}");
            let p = plan(&g, &epilogue_stack()).unwrap();
            // Both adds of a residual are gone (the biases are in the fused nodes).
            assert!(!p.graph().op_counts().contains_key("add"), "{p}");
        }
    }
}

#[test]
fn residuals_it_must_not_take_are_left_alone() {
    let dt = DType::F32;
    let b = Builder::new();
    let p = Projection::new(&b, dt, &[4, 6], 6);
    // After an activation: `relu(p) + x` is not `relu(p + x)`.
    let activated = p.out().relu().unwrap().add(p.x).unwrap();
    // An addend that broadcasts (a row vector): not a tensor of the result's shape.
    let row = b.constant(ramp(dt, &[1, 6], 3));
    let broadcast = p.out().add(row).unwrap();
    b.output(&[activated, broadcast]).unwrap();
    let inputs = vec![ramp(dt, &[4, 6], 9)];
    check_left_alone(&b.finish(), &inputs, 2, ("add", 2));
}

/// GPT-2's attention inputs: the fused QKV projection split into q, k, v, each
/// reshaped to `[B, S, H, D]` and swapped to `[B, H, S, D]` (q and v by `transpose`,
/// k by `permute`, as the dynamo exporter writes them), then `softmax(q kᵀ) v`.
fn qkv_heads(dt: DType, rows: usize, heads: usize, d: usize) -> (Graph, Vec<Tensor>) {
    let k = heads * d;
    let b = Builder::new();
    let qkv = Projection::new(&b, dt, &[2, rows, k], 3 * k).out();
    let parts = qkv.split_with(&[k as i64, k as i64, k as i64], -1).unwrap();
    let split = [2, rows as i64, heads as i64, d as i64];
    let q = parts[0].reshape(&split).unwrap().transpose(1, 2).unwrap();
    let kk = parts[1]
        .reshape(&split)
        .unwrap()
        .permute(&[0, 2, 1, 3])
        .unwrap();
    let v = parts[2].reshape(&split).unwrap().transpose(2, 1).unwrap();
    let p = q
        .matmul(kk.transpose(-2, -1).unwrap())
        .unwrap()
        .mul(0.1)
        .unwrap()
        .softmax(-1)
        .unwrap();
    let y = p.matmul(v).unwrap();
    b.output(&[y]).unwrap();
    (b.finish(), vec![ramp(dt, &[2, rows, k], 7)])
}

#[test]
fn head_splits_fold_into_the_pieces() {
    for dt in [DType::F32, DType::F64] {
        for (rows, heads, d) in [(1, 1, 1), (5, 2, 3), (17, 4, 16)] {
            let (g, inputs) = qkv_heads(dt, rows, heads, d);
            let fused = check_against_reference(&g, &epilogue_stack(), &inputs, dt);
            assert_eq!(fused, 3, "{dt} {rows} rows, {heads}x{d}");
            let p = plan(&g, &epilogue_stack()).unwrap();
            let counts = p.graph().op_counts();
            for gone in ["split", "reshape", "permute"] {
                assert!(!counts.contains_key(gone), "{gone} left\n{p}");
            }
            // Only the kᵀ of the scores is left of the transposes.
            assert_eq!(counts.get("transpose"), Some(&1), "{p}");
        }
    }
    // f16/bf16 keep the head split as the graph has it (a product per head would
    // convert the weight whole for each piece) and still agree.
    for dt in [DType::F16, DType::BF16] {
        let fused = check_any(|dt| qkv_heads(dt, 17, 4, 16), dt);
        assert_eq!(fused, 3, "{dt}");
        let (g, _) = qkv_heads(dt, 17, 4, 16);
        let p = plan(&g, &epilogue_stack()).unwrap();
        assert_eq!(p.graph().op_counts().get("reshape"), Some(&3), "{p}");
    }
}

#[test]
fn reshapes_that_are_not_head_splits_are_left_alone() {
    let dt = DType::F32;
    let b = Builder::new();
    let p = Projection::new(&b, dt, &[2, 6, 8], 8);
    let (x, bias) = (p.x, p.bias);
    // Split into heads but not swapped: stays `[B, S, H, D]`.
    let unswapped = p.out().reshape(&[2, 6, 2, 4]).unwrap().relu().unwrap();
    // Swapped, but the wrong dims (B and S).
    let wrong = p
        .out()
        .reshape(&[2, 6, 2, 4])
        .unwrap()
        .transpose(0, 1)
        .unwrap();
    // A head split of a product with a batch of weights (`[2, 8, 8]`): the kernel
    // writes heads for a weight matrix only.
    let batched_w = b.constant(ramp(dt, &[2, 8, 8], 3));
    let batched = x
        .matmul(batched_w)
        .unwrap()
        .add(bias)
        .unwrap()
        .reshape(&[2, 6, 2, 4])
        .unwrap()
        .transpose(1, 2)
        .unwrap();
    // Not a head split: rows merged.
    let merged = p
        .out()
        .reshape(&[12, 2, 4])
        .unwrap()
        .transpose(0, 1)
        .unwrap();
    b.output(&[unswapped, wrong, batched, merged]).unwrap();
    let inputs = vec![ramp(dt, &[2, 6, 8], 9)];
    check_left_alone(&b.finish(), &inputs, 4, ("reshape", 4));
}

#[test]
fn a_node_the_kernel_refuses_runs_through_its_decomposition() {
    // A hand-made node with heads over a batch of weights: the executor's check turns
    // it down, and the plan runs its decomposition instead of failing at run time.
    let dt = DType::F32;
    let b = Builder::new();
    let x = b.input("x", TensorMeta::new(dt, [2usize, 6, 8]));
    let w = b.constant(ramp(dt, &[2, 8, 8], 1));
    let bias = b.constant(ramp(dt, &[8], 2));
    let y = b
        .apply(
            &MATMUL_EPILOGUE,
            &[x.value(), w.value(), bias.value()],
            &[("heads", graphrw::ops::AttrValue::Int(2))],
        )
        .unwrap()[0];
    b.output(&[b.var(y)]).unwrap();
    let g = b.finish();
    let inputs = vec![ramp(dt, &[2, 6, 8], 9)];
    // Its product and bias fuse again, as a plain epilogue; the head split runs as
    // the decomposition's reshape and transpose.
    check_left_alone(&g, &inputs, 1, ("reshape", 1));
    let p = plan(&g, &epilogue_stack()).unwrap();
    assert_eq!(p.graph().op_counts().get("transpose"), Some(&1), "{p}");
}

/// Whether the epilogue executor packs weights with `opts` (`None`: it may, as the
/// products measure): the options allow packing and AVX2+FMA or AVX-512, which the CPU
/// has (the packed GEMM's kernels), by the fixed rule (these products have 64 rows or
/// more) or a packed kernel pinned; not with the `gemm` crate pinned.
fn packing_with(opts: &KernelOptions) -> Option<bool> {
    let can = opts.pack_weights && opts.isa() >= Isa::Avx2Fma;
    match opts.product_kernel {
        ProductChoice::Measure if can => None,
        ProductChoice::Pin(ProductKernel::Gemm) => Some(false),
        _ => Some(can),
    }
}

/// f32 weights are packed at their first run (where the CPU has the packed GEMM and the
/// plan's options allow it) and reused by the next: both runs agree with the reference
/// stack, through the plain, residual-free MLP chains and the head-split QKV pieces
/// (heads of 32 columns), on the CPU's best kernel and on the AVX2+FMA one (forced by
/// capping the instruction set; the same on a CPU without AVX-512). With packing off
/// (`KernelOptions::pack_weights`), the instruction set capped below AVX2, or a CPU
/// without the packed GEMM, nothing is packed and the results are the same.
///
/// By default each product shape measures its kernel: the results are the same
/// whichever wins.
#[test]
fn packed_weights_give_the_reference_results_run_after_run() {
    let base = KernelOptions::default();
    let rule = base.with_product_kernel(ProductChoice::Rule);
    let options = [
        rule,
        rule.with_pack_weights(false),
        rule.with_max_isa(Isa::Avx2Fma),
        rule.with_max_isa(Isa::Baseline),
        base,
        base.with_product_kernel(ProductChoice::Pin(ProductKernel::Gemm)),
        base.with_product_kernel(ProductChoice::Pin(ProductKernel::Packed(Isa::Avx2Fma))),
    ];
    if packing_with(&rule) != Some(true) {
        println!(
            "SKIPPED: packing weights needs AVX2+FMA (checked: nothing is packed, the \
             results match)"
        );
    }
    for opts in options {
        for (g, inputs) in [
            qkv_heads(DType::F32, 70, 2, 32),
            mlp(DType::F32, 40, 64, 96, "tanh"),
        ] {
            let (want, _) = plan(&g, &reference_stack()).unwrap().run(&inputs).unwrap();
            let epilogue = Arc::new(EpilogueCpu::default());
            let stack: Vec<Arc<dyn Executor>> = vec![epilogue.clone(), Arc::new(ReferenceCpu)];
            let p = plan_with(&g, &stack, opts).unwrap();
            for run in 0..2 {
                let (got, _) = p.run(&inputs).unwrap();
                assert_close_tensor(
                    &got[0],
                    &want[0],
                    Tol::new(1e-4, 1e-5),
                    &format!("run {run} with {opts:?}\n{p}"),
                );
                match packing_with(&opts) {
                    Some(true) => assert!(epilogue.packed_bytes() > 0, "nothing was packed\n{p}"),
                    Some(false) => {
                        assert_eq!(epilogue.packed_bytes(), 0, "packed with {opts:?}\n{p}")
                    }
                    None => {}
                }
            }
        }
    }
}

/// By the fixed rule, products of fewer than `cpu::PackedWeight::MIN_ROWS` rows run on
/// the `gemm` crate: their weights are not packed, where the CPU has the packed GEMM too
/// (2 x 20 rows here; the test above packs the same MLP's weights at 2 x 40).
#[test]
fn weights_of_products_with_few_rows_are_not_packed_by_the_rule() {
    const _: () = assert!(2 * 20 < graphrw_kernels::cpu::PackedWeight::MIN_ROWS);
    let (g, inputs) = mlp(DType::F32, 20, 64, 96, "tanh");
    let (want, _) = plan(&g, &reference_stack()).unwrap().run(&inputs).unwrap();
    let epilogue = Arc::new(EpilogueCpu::default());
    let stack: Vec<Arc<dyn Executor>> = vec![epilogue.clone(), Arc::new(ReferenceCpu)];
    let rule = KernelOptions::default().with_product_kernel(ProductChoice::Rule);
    let p = plan_with(&g, &stack, rule).unwrap();
    let (got, _) = p.run(&inputs).unwrap();
    assert_close_tensor(&got[0], &want[0], Tol::new(1e-4, 1e-5), &format!("{p}"));
    assert_eq!(epilogue.packed_bytes(), 0, "packed for 40 rows\n{p}");
}

/// The generated bias + GELU (`fused.bias_gelu`, erf form) after a product folds into
/// it, as the `add` + `gelu` it replaces does.
#[test]
fn a_generated_bias_gelu_folds_into_the_product() {
    let dt = DType::F32;
    let b = Builder::new();
    let x = b.input("x", TensorMeta::new(dt, [70usize, 48]));
    let w = b.constant(ramp(dt, &[48, 32], 1));
    let bias = b.constant(ramp(dt, &[32], 2));
    let product = x.matmul(w).unwrap();
    let y = b
        .call(&graphrw::generated::builtin::bias_gelu::OP)
        .arg(product)
        .arg(bias)
        .build()
        .unwrap();
    b.output(&[y]).unwrap();
    let g = b.finish();
    let inputs = vec![ramp(dt, &[70, 48], 3)];
    // The default stack: its fused-kernel executor keeps the generated node whole
    // (without it, the node is decomposed before the epilogue looks).
    assert_eq!(
        check_against_reference(&g, &default_stack(), &inputs, dt),
        1
    );
    let p = plan(&g, &default_stack()).unwrap();
    let ops = p.graph().op_counts();
    assert_eq!(ops.get("fused.bias_gelu"), None, "{p}");
    assert!(format!("{p}").contains("activation=\"gelu\""), "{p}");
}

/// GPT-2's GELU, written out in its tanh form after a product and its bias: the rules
/// make it a generated `fused.gelu_tanh`, which folds into the product as the built-in
/// `gelu(approximate = "tanh")` does.
#[test]
fn a_written_out_tanh_gelu_folds_into_the_product() {
    let dt = DType::F32;
    let b = Builder::new();
    let h = Projection::new(&b, dt, &[2, 9, 24], 40).out();
    let cube = h.mul(h).unwrap().mul(h).unwrap().mul(0.044715).unwrap();
    let inner = h.add(cube).unwrap().mul(0.7978845608028654).unwrap();
    let t = inner.tanh().unwrap().add(1.0).unwrap();
    let y = h.mul(0.5).unwrap().mul(t).unwrap();
    b.output(&[y]).unwrap();
    let mut g = b.finish();
    let done = graphrw::rules::optimize(&mut g).unwrap();
    assert_eq!(done.fused_nodes.get("fused.gelu_tanh"), Some(&1));
    let inputs = vec![ramp(dt, &[2, 9, 24], 3)];
    assert_eq!(
        check_against_reference(&g, &default_stack(), &inputs, dt),
        1
    );
    let p = plan(&g, &default_stack()).unwrap();
    assert_eq!(p.graph().op_counts().get("fused.gelu_tanh"), None, "{p}");
    assert!(format!("{p}").contains("activation=\"gelu_tanh\""), "{p}");
}

/// How a test writes the transpose of its weight.
#[derive(Clone, Copy, Debug)]
enum Swap {
    Transpose,
    TransposeNegative,
    Permute,
}

impl Swap {
    fn of<'b>(self, w: Var<'b>) -> Var<'b> {
        match self {
            Swap::Transpose => w.transpose(0, 1).unwrap(),
            Swap::TransposeNegative => w.transpose(-1, -2).unwrap(),
            Swap::Permute => w.permute(&[1, 0]).unwrap(),
        }
    }
}

/// A language model's head on a tied embedding, as dynamo exports write it:
/// `x @ swap(e)` for a constant `e` of `[n, k]` (x of `[2, rows, k]`); with `bias`,
/// `relu(. + bias)`; with `split`, the product split in two along its columns (first
/// piece of `split` columns); with `gathered`, `e` is also read by an `index_select`
/// of three rows (the embedding), a second output.
fn tied_head(
    dt: DType,
    (rows, k, n): (usize, usize, usize),
    swap: Swap,
    bias: bool,
    split: Option<usize>,
    gathered: bool,
) -> (Graph, Vec<Tensor>) {
    let b = Builder::new();
    let x = b.input("x", TensorMeta::new(dt, [2usize, rows, k]));
    let e = b.constant(ramp(dt, &[n, k], 1));
    let mut y = x.matmul(swap.of(e)).unwrap();
    if bias {
        y = y
            .add(b.constant(ramp(dt, &[n], 2)))
            .unwrap()
            .relu()
            .unwrap();
    }
    let mut outs = match split {
        Some(s) => y.split_with(&[s as i64, (n - s) as i64], -1).unwrap(),
        None => vec![y],
    };
    if gathered {
        let ids = Tensor::from_vec(vec![3], vec![0i64, n as i64 - 1, 1]).unwrap();
        outs.push(e.index_select(b.constant(ids), 0).unwrap());
    }
    b.output(&outs).unwrap();
    (b.finish(), vec![ramp(dt, &[2, rows, k], 3)])
}

/// The kernel options the transposed-weight tests run under: each product kernel
/// pinned (a packed kernel the CPU lacks falls back to the rule) and the default
/// measured choice.
fn every_product_kernel() -> Vec<KernelOptions> {
    let base = KernelOptions::default();
    let mut all: Vec<KernelOptions> = [
        ProductKernel::Gemm,
        ProductKernel::Packed(Isa::Avx512),
        ProductKernel::Packed(Isa::Avx2Fma),
    ]
    .into_iter()
    .map(|k| base.with_product_kernel(ProductChoice::Pin(k)))
    .collect();
    all.push(base);
    all
}

/// Plans `g` on the epilogue stack with `opts` and runs it twice (the second run on
/// the weights packed by the first), each against the reference stack; returns the plan
/// and the executor.
fn run_twice_against_reference(
    g: &Graph,
    inputs: &[Tensor],
    opts: KernelOptions,
    tol: Tol,
) -> (graphrw::exec::Plan, Arc<EpilogueCpu>) {
    verify(g).unwrap();
    let (want, _) = plan(g, &reference_stack()).unwrap().run(inputs).unwrap();
    let epilogue = Arc::new(EpilogueCpu::default());
    let stack: Vec<Arc<dyn Executor>> = vec![epilogue.clone(), Arc::new(ReferenceCpu)];
    let p = plan_with(g, &stack, opts).unwrap();
    verify(p.graph()).unwrap();
    for run in 0..2 {
        let (got, _) = p.run(inputs).unwrap();
        assert_eq!(got.len(), want.len());
        for (i, (o, w)) in got.iter().zip(&want).enumerate() {
            let what = format!("output {i}, run {run} with {opts:?}\n{p}");
            assert_close_tensor(o, w, tol, &what);
        }
    }
    (p, epilogue)
}

/// A product by the transpose of a constant matrix (`transpose` either way round, or
/// `permute`), bare or with a bias and activation, becomes one epilogue node that reads
/// the matrix in place (`weight_transposed`): no transpose is left in the plan, and it
/// gives the reference stack's results on every product kernel, run after run (f32:
/// partial panels of both packed kernels, 200 columns; f64: the `gemm` crate).
#[test]
fn a_product_by_a_transposed_constant_folds_the_transpose() {
    for dt in [DType::F32, DType::F64] {
        for swap in [Swap::Transpose, Swap::TransposeNegative, Swap::Permute] {
            for bias in [false, true] {
                let (g, inputs) = tied_head(dt, (40, 48, 200), swap, bias, None, false);
                for opts in every_product_kernel() {
                    let tol = Tol::new(1e-4, 1e-5);
                    let (p, epilogue) = run_twice_against_reference(&g, &inputs, opts, tol);
                    let ops = p.graph().op_counts();
                    let what = format!("{dt} {swap:?}, bias {bias}, {opts:?}\n{p}");
                    assert_eq!(ops.get(MATMUL_EPILOGUE.name), Some(&1), "{what}");
                    for gone in ["transpose", "permute", "matmul", "add", "relu"] {
                        assert!(!ops.contains_key(gone), "{gone} left: {what}");
                    }
                    assert!(format!("{p}").contains("weight_transposed=1"), "{what}");
                    if dt == DType::F32 && packing_with(&opts) == Some(true) {
                        assert!(epilogue.packed_bytes() > 0, "nothing packed: {what}");
                    }
                    if dt == DType::F64 || packing_with(&opts) == Some(false) {
                        assert_eq!(epilogue.packed_bytes(), 0, "packed: {what}");
                    }
                }
            }
        }
    }
}

/// The transposed weight of a tied embedding that an `index_select` also reads (the
/// embedding lookup): the product still folds its transpose, and the lookup reads the
/// weight's values unchanged, before and after it is packed; a product split in two
/// becomes two nodes, each on a column range of the transposed weight.
#[test]
fn a_tied_embedding_read_by_a_gather_and_a_split_head_fold_too() {
    for opts in every_product_kernel() {
        let tol = Tol::new(1e-4, 1e-5);
        let (g, inputs) = tied_head(DType::F32, (70, 32, 100), Swap::Permute, false, None, true);
        let (p, _) = run_twice_against_reference(&g, &inputs, opts, tol);
        let ops = p.graph().op_counts();
        assert_eq!(ops.get(MATMUL_EPILOGUE.name), Some(&1), "{p}");
        assert!(!ops.contains_key("permute"), "{p}");
        assert_eq!(ops.get("index_select"), Some(&1), "{p}");
        let split = Some(40);
        let (g, inputs) = tied_head(
            DType::F32,
            (70, 32, 100),
            Swap::Transpose,
            true,
            split,
            false,
        );
        let (p, _) = run_twice_against_reference(&g, &inputs, opts, tol);
        let ops = p.graph().op_counts();
        assert_eq!(ops.get(MATMUL_EPILOGUE.name), Some(&2), "{p}");
        for gone in ["transpose", "split"] {
            assert!(!ops.contains_key(gone), "{gone} left\n{p}");
        }
        assert!(format!("{p}").contains("columns=[40, 100]"), "{p}");
    }
}

/// A transpose another node also reads stays for it (the product folds it all the
/// same); the fused node's decomposition (with its transpose) gives the same results
/// where no executor takes it; an f16 weight keeps its transpose (the kernel would
/// convert the whole weight on every run).
#[test]
fn transposes_read_elsewhere_stay_and_the_node_decomposes() {
    let dt = DType::F32;
    let b = Builder::new();
    let x = b.input("x", TensorMeta::new(dt, [9usize, 16]));
    let e = b.constant(ramp(dt, &[24, 16], 1));
    let et = e.transpose(0, 1).unwrap();
    let y = x.matmul(et).unwrap();
    let z = et.relu().unwrap();
    b.output(&[y, z]).unwrap();
    let g = b.finish();
    let inputs = vec![ramp(dt, &[9, 16], 2)];
    let tol = Tol::new(1e-4, 1e-5);
    let (p, _) = run_twice_against_reference(&g, &inputs, KernelOptions::default(), tol);
    let ops = p.graph().op_counts();
    assert_eq!(ops.get(MATMUL_EPILOGUE.name), Some(&1), "{p}");
    assert_eq!(ops.get("transpose"), Some(&1), "kept for the relu\n{p}");
    let (want, _) = plan(&g, &reference_stack()).unwrap().run(&inputs).unwrap();
    let decomposed = plan(p.graph(), &reference_stack()).unwrap();
    let (got, _) = decomposed.run(&inputs).unwrap();
    assert_close_tensor(&got[0], &want[0], tol, &format!("{decomposed}"));

    let (g, inputs) = tied_head(DType::F16, (8, 16, 40), Swap::Transpose, false, None, false);
    let (p, _) =
        run_twice_against_reference(&g, &inputs, KernelOptions::default(), Tol::new(0.05, 3e-2));
    assert!(!format!("{p}").contains("weight_transposed=1"), "{p}");
}

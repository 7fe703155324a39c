//! Every built-in generated kernel against its decomposition on the reference executor
//! (f32, f16, bf16; broadcast shapes; sizes 0, 1, odd and larger than a tile; NaN and
//! inf), the rules that fuse decomposed chains, the checker's refusals, and the
//! symbolically derived vjp against finite differences in f64.

use std::sync::Arc;

use graphrw::exec::{generated_executor, GENERATED_CPU};
use graphrw::exec::{plan, Executor, ReferenceCpu};
use graphrw::generated::{builtin, CudaLaunch, FusedKernel};
use graphrw::ops::AttrValue;
use graphrw::{Builder, DType, Dim, Graph, Tensor, TensorMeta};
use graphrw_kernels::testing::compare;

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0
    }
}

fn shape_of(param: &str, rows: usize, n: usize) -> Vec<usize> {
    match param {
        "weight" | "bias" => vec![n],
        "mask" => vec![1, n],
        _ => vec![rows, n],
    }
}

fn scalar_of(name: &str) -> f64 {
    match name {
        "eps" => 1e-5,
        "scale" => 0.125,
        _ => 1.0,
    }
}

/// A graph with one node of the kernel's op.
fn one_node(k: &FusedKernel, shapes: &[Vec<usize>], dtype: DType) -> Graph {
    let g = Builder::new();
    let ins: Vec<_> = k
        .tensors
        .iter()
        .zip(shapes)
        .map(|(n, s)| {
            g.input(
                n,
                TensorMeta::new(dtype, s.iter().map(|&d| Dim::from(d)).collect::<Vec<Dim>>()),
            )
            .value()
        })
        .collect();
    let attrs: Vec<(&str, AttrValue)> = k
        .scalars
        .iter()
        .map(|s| (*s, AttrValue::Float(scalar_of(s))))
        .collect();
    let out = g.apply(k.op, &ins, &attrs).expect("fused node");
    g.output(&[g.var(out[0])]).unwrap();
    g.finish()
}

fn run(graph: &Graph, stack: &[Arc<dyn Executor>], inputs: &[Tensor]) -> Tensor {
    try_run(graph, stack, inputs).expect("run")
}

fn try_run(
    graph: &Graph,
    stack: &[Arc<dyn Executor>],
    inputs: &[Tensor],
) -> Result<Tensor, String> {
    let p = plan(graph, stack).map_err(|e| e.to_string())?;
    Ok(p.run(inputs).map_err(|e| e.to_string())?.0.remove(0))
}

fn generated() -> Vec<Arc<dyn Executor>> {
    vec![Arc::new(generated_executor()), Arc::new(ReferenceCpu)]
}

fn reference() -> Vec<Arc<dyn Executor>> {
    vec![Arc::new(ReferenceCpu)]
}

fn assert_close(what: &str, got: &Tensor, want: &Tensor, tol: f64) {
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    let what = format!("{what} (against the decomposition)");
    compare::assert_close_tensor(got, want, compare::Tol::scaled(tol), &what);
}

fn check_kernel(k: &FusedKernel, rows: usize, n: usize, dtype: DType, rng: &mut Lcg) {
    let shapes: Vec<Vec<usize>> = k.tensors.iter().map(|t| shape_of(t, rows, n)).collect();
    let graph = one_node(k, &shapes, dtype);
    let inputs: Vec<Tensor> = shapes
        .iter()
        .map(|s| {
            let vals: Vec<f64> = (0..s.iter().product::<usize>())
                .map(|_| rng.next())
                .collect();
            Tensor::from_f64_slice(dtype, s, &vals).unwrap()
        })
        .collect();
    let what = format!("{} {dtype} [{rows}, {n}]", k.op.name);
    // The generated kernel must take the node: comparing the decomposition with itself
    // proves nothing. Rotary embeddings over odd widths (no halves to rotate) are the
    // one shape a kernel refuses; its plan runs the decomposition, tested elsewhere.
    let taken = executor_of_fused(&graph, k);
    if k.op.name == builtin::rotary_embedding::KERNEL.op.name && n % 2 == 1 {
        assert_ne!(
            taken.as_deref(),
            Some(GENERATED_CPU),
            "{what}: odd width taken"
        );
        return;
    }
    assert_eq!(
        taken.as_deref(),
        Some(GENERATED_CPU),
        "{what}: the generated kernel should take the node"
    );
    let want = match try_run(&graph, &reference(), &inputs) {
        Ok(t) => t,
        Err(e) => {
            // The decomposition refuses (amax over empty rows): so must the kernel.
            let got = try_run(&graph, &generated(), &inputs);
            assert!(
                got.is_err(),
                "{what}: the decomposition fails ({e}) but the kernel runs"
            );
            return;
        }
    };
    let got = run(&graph, &generated(), &inputs);
    let tol = match dtype {
        DType::F16 => 2e-2,
        DType::BF16 => 5e-2,
        _ => 2e-5,
    };
    assert_close(&what, &got, &want, tol);
}

#[test]
fn every_kernel_matches_its_decomposition() {
    let mut rng = Lcg(1);
    for k in builtin::ALL {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for (rows, n) in [(1, 1), (3, 37), (2, 1500), (0, 8), (5, 0)] {
                check_kernel(k, rows, n, dtype, &mut rng);
            }
        }
        check_kernel(k, 70, 1031, DType::F32, &mut rng); // parallel path (> 65536 elements)
    }
}

/// Each instruction-set build of the generated kernels' loops (baseline, AVX2+FMA,
/// AVX-512) against the decompositions, on the ones this CPU has: the process picks one
/// build, so the others are otherwise never run here. Sizes around the 16-lane vectors.
#[test]
fn every_isa_build_matches_the_decomposition() {
    use graphrw_kernels::elementwise::{with_isa, Isa};
    let mut ran = Vec::new();
    for isa in [Isa::Baseline, Isa::Avx2Fma, Isa::Avx512] {
        let done = with_isa(isa, || {
            assert_eq!(graphrw_kernels::elementwise::isa(), isa);
            let mut rng = Lcg(7);
            for k in builtin::ALL {
                for dtype in [DType::F32, DType::F16, DType::BF16] {
                    for (rows, n) in [(1, 1), (2, 15), (3, 17), (2, 33), (4, 1025)] {
                        check_kernel(k, rows, n, dtype, &mut rng);
                    }
                }
                // The parallel path: chunks on rayon's threads take the caller's build.
                check_kernel(k, 70, 1031, DType::F32, &mut rng);
            }
        });
        if done.is_some() {
            ran.push(isa);
        } else {
            println!("SKIPPED: {isa:?} build of the generated kernels: not on this CPU");
        }
    }
    assert!(
        ran.contains(&Isa::Baseline),
        "the baseline build runs everywhere"
    );
}

#[test]
fn the_plan_names_the_generated_executor() {
    let k = &builtin::rms_norm::KERNEL;
    let graph = one_node(k, &[vec![2, 8], vec![8]], DType::F32);
    let p = plan(&graph, &generated()).unwrap();
    assert!(p.to_string().contains("cpu-generated"), "{p}");
}

#[test]
fn nan_and_inf_propagate_as_in_the_decomposition() {
    for k in [
        &builtin::gelu_erf::KERNEL,
        &builtin::rms_norm::KERNEL,
        &builtin::softmax_scale_mask::KERNEL,
        &builtin::swiglu::KERNEL,
        &builtin::rotary_embedding::KERNEL,
    ] {
        let shapes: Vec<Vec<usize>> = k.tensors.iter().map(|t| shape_of(t, 3, 4)).collect();
        let graph = one_node(k, &shapes, DType::F32);
        let special = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1.0, -0.5, 0.0];
        let inputs: Vec<Tensor> = shapes
            .iter()
            .enumerate()
            .map(|(j, s)| {
                let vals: Vec<f64> = (0..s.iter().product::<usize>())
                    .map(|i| special[(i + j) % special.len()])
                    .collect();
                Tensor::from_f64_slice(DType::F32, s, &vals).unwrap()
            })
            .collect();
        assert_eq!(
            executor_of_fused(&graph, k).as_deref(),
            Some(GENERATED_CPU),
            "{}: the generated kernel should take the node",
            k.op.name
        );
        let want = run(&graph, &reference(), &inputs);
        let got = run(&graph, &generated(), &inputs);
        assert_close(k.op.name, &got, &want, 1e-5);
    }
}

#[test]
fn decomposed_chains_are_fused_in_each_common_spelling() {
    let g = Builder::new();
    let x = g.input("x", TensorMeta::new(DType::F32, [2usize, 16]));
    let w = g.input("w", TensorMeta::new(DType::F32, [16usize]));
    // GELU as BERT exports it: x * (0.5 * (erf(x * 0.7071) + 1)).
    let e = x
        .mul(std::f64::consts::FRAC_1_SQRT_2)
        .unwrap()
        .erf()
        .unwrap()
        .add(1.0)
        .unwrap();
    let gelu = x.mul(g.var(g.mul(0.5, e).unwrap())).unwrap();
    // GPT-2's tanh GELU: (x * 0.5) * (tanh((x + x^3 * 0.044715) * 0.79788) + 1).
    let inner = x
        .add(x.pow(3.0).unwrap().mul(0.044715).unwrap())
        .unwrap()
        .mul(0.7978845608)
        .unwrap();
    let gt = x
        .mul(0.5)
        .unwrap()
        .mul(inner.tanh().unwrap().add(1.0).unwrap())
        .unwrap();
    // Llama's RMSNorm: w * (x * reciprocal(sqrt(mean(x^2) + eps))).
    let ms = x
        .pow(2.0)
        .unwrap()
        .mean_with(&[-1], true)
        .unwrap()
        .add(1e-6)
        .unwrap();
    let rms = g.var(
        g.mul(w, x.mul(ms.sqrt().unwrap().reciprocal().unwrap()).unwrap())
            .unwrap(),
    );
    // SwiGLU: silu(x) * w, as x * sigmoid(x) * w.
    let sw = x.mul(x.sigmoid().unwrap()).unwrap().mul(w).unwrap();
    g.output(&[gelu, gt, rms, sw]).unwrap();
    let mut graph = g.finish();
    let before = graph.clone();
    let report = graphrw::generated::fuse_kernels(&mut graph).unwrap();
    let ops = graph.op_counts();
    for op in [
        "fused.gelu_erf",
        "fused.gelu_tanh",
        "fused.rms_norm",
        "fused.swiglu",
    ] {
        assert!(ops.contains_key(op), "{op} did not fire: {report}\n{graph}");
    }
    let inputs = vec![
        Tensor::from_f64_slice(
            DType::F32,
            &[2, 16],
            &(0..32).map(|i| i as f64 / 8.0 - 2.0).collect::<Vec<_>>(),
        )
        .unwrap(),
        Tensor::from_f64_slice(
            DType::F32,
            &[16],
            &(0..16).map(|i| 1.0 + i as f64 / 16.0).collect::<Vec<_>>(),
        )
        .unwrap(),
    ];
    let want = plan(&before, &reference()).unwrap().run(&inputs).unwrap().0;
    let got = plan(&graph, &generated()).unwrap().run(&inputs).unwrap().0;
    for (g, w) in got.iter().zip(&want) {
        assert_close("fused graph", g, w, 1e-5);
    }
}

#[test]
fn the_checker_refuses_what_the_kernel_does_not_take() {
    let k = &builtin::rms_norm::KERNEL;
    // x broadcast along the last dim, weight full: the reduction's row is not the output's.
    let graph = one_node(k, &[vec![2, 1], vec![8]], DType::F32);
    let p = plan(&graph, &generated()).unwrap();
    assert!(!p.assignments().any(|(_, e)| e == GENERATED_CPU), "{p}");
    // The printout says why it falls back.
    assert!(
        p.to_string().contains("#   refused by cpu-generated: "),
        "{p}"
    );
    // It still runs, through the decomposition.
    let x = Tensor::from_vec(vec![2, 1], vec![1f32, 2.0]).unwrap();
    let w = Tensor::from_vec(vec![8], vec![1f32; 8]).unwrap();
    let out = p.run(&[x, w]).unwrap().0.remove(0);
    assert_eq!(out.shape(), &[2, 8]);
    // The kernel itself refuses it too, with a message.
    let x = Tensor::from_vec(vec![2, 1], vec![1f32, 2.0]).unwrap();
    let w = Tensor::from_vec(vec![8], vec![1f32; 8]).unwrap();
    let err = (k.cpu)(&[&x, &w], &[1e-6], DType::F32).unwrap_err();
    assert!(err.to_string().contains("reduction"), "{err}");
    // Shapes that do not broadcast: an error, not a panic.
    let a = Tensor::from_vec(vec![3], vec![1f32; 3]).unwrap();
    let b = Tensor::from_vec(vec![4], vec![1f32; 4]).unwrap();
    let err = (builtin::swiglu::KERNEL.cpu)(&[&a, &b], &[], DType::F32).unwrap_err();
    assert!(err.to_string().contains("broadcast"), "{err}");
    // An integer output: refused.
    let err = (builtin::swiglu::KERNEL.cpu)(&[&a, &a], &[], DType::I64).unwrap_err();
    assert!(err.to_string().contains("unsupported dtype"), "{err}");
}

/// Sum over the output of `g * f(inputs)` as a function of one input element.
fn objective(k: &FusedKernel, ins: &[Tensor], scalars: &[f64], g: &[f64]) -> f64 {
    let refs: Vec<&Tensor> = ins.iter().collect();
    let y = (k.cpu)(&refs, scalars, DType::F64).unwrap().to_f64_vec();
    y.iter().zip(g).map(|(a, b)| a * b).sum()
}

#[test]
fn vjp_matches_finite_differences_in_f64() {
    let mut rng = Lcg(9);
    for k in builtin::ALL {
        assert_eq!(k.vjp.len(), k.tensors.len(), "{}", k.op.name);
        // An even row: rotate_half kernels take even rows only.
        let (rows, n) = (2, 6);
        // Full-shape parameters only: the vjp gives gradients at the output's shape.
        let shapes: Vec<Vec<usize>> = k.tensors.iter().map(|_| vec![rows, n]).collect();
        let mut ins: Vec<Tensor> = shapes
            .iter()
            .map(|s| {
                let v: Vec<f64> = (0..rows * n).map(|_| rng.next()).collect();
                Tensor::from_f64_slice(DType::F64, s, &v).unwrap()
            })
            .collect();
        let scalars: Vec<f64> = k.scalars.iter().map(|s| scalar_of(s)).collect();
        let g: Vec<f64> = (0..rows * n).map(|_| rng.next()).collect();
        let gt = Tensor::from_f64_slice(DType::F64, &[rows, n], &g).unwrap();
        for (p, vjp) in k.vjp.iter().enumerate() {
            let mut args: Vec<&Tensor> = ins.iter().collect();
            args.push(&gt);
            let grad = (vjp.cpu)(&args, &scalars, DType::F64).unwrap().to_f64_vec();
            for i in 0..rows * n {
                let h = 1e-6;
                let base = ins[p].to_f64_vec();
                let mut plus = base.clone();
                plus[i] += h;
                let mut minus = base.clone();
                minus[i] -= h;
                ins[p] = Tensor::from_f64_slice(DType::F64, &[rows, n], &plus).unwrap();
                let fp = objective(k, &ins, &scalars, &g);
                ins[p] = Tensor::from_f64_slice(DType::F64, &[rows, n], &minus).unwrap();
                let fm = objective(k, &ins, &scalars, &g);
                ins[p] = Tensor::from_f64_slice(DType::F64, &[rows, n], &base).unwrap();
                let fd = (fp - fm) / (2.0 * h);
                assert!(
                    (fd - grad[i]).abs() <= 1e-5 * (1.0 + fd.abs()),
                    "{} d/d{}[{i}]: vjp {} vs finite difference {fd}",
                    k.op.name,
                    vjp.param,
                    grad[i]
                );
            }
        }
    }
}

fn random(dtype: DType, shape: &[usize], rng: &mut Lcg) -> Tensor {
    let vals: Vec<f64> = (0..shape.iter().product::<usize>())
        .map(|_| rng.next())
        .collect();
    Tensor::from_f64_slice(dtype, shape, &vals).unwrap()
}

/// The executor a one-node graph's fused node runs on (`None` when the plan runs its
/// decomposition instead).
fn executor_of_fused(graph: &Graph, k: &FusedKernel) -> Option<String> {
    let p = plan(graph, &generated()).unwrap();
    let node = p.graph().nodes_with_op(k.op.name).next()?;
    p.executor_of(node).map(str::to_string)
}

/// `x * cos + rotate_half(x) * sin` computed directly (f64), over rows of `d`.
fn rotary_by_hand(x: &[f64], cos: &[f64], sin: &[f64], d: usize) -> Vec<f64> {
    let h = d / 2;
    (0..x.len())
        .map(|i| {
            let (row, j) = (i / d, i % d);
            let rot = if j < h {
                -x[row * d + j + h]
            } else {
                x[row * d + j - h]
            };
            x[i] * cos[i] + rot * sin[i]
        })
        .collect()
}

#[test]
fn rotary_matches_its_decomposition_on_llama_shapes() {
    let k = &builtin::rotary_embedding::KERNEL;
    let mut rng = Lcg(21);
    // x [B, H, S, D] against cos/sin [1, 1, S, D] (Llama) and other broadcasts; d = 2,
    // odd row counts, rows longer than a tile (2050 > 1024, a tile crossing the halves),
    // size 0 in the rows and in the last dimension.
    let cases: [(Vec<usize>, Vec<usize>); 9] = [
        (vec![1, 4, 16, 16], vec![1, 1, 16, 16]),
        (vec![2, 3, 5, 8], vec![1, 1, 5, 8]),
        (vec![3, 2], vec![3, 2]),
        (vec![7, 2], vec![1, 2]),
        (vec![3, 2050], vec![1, 2050]),
        (vec![1, 3, 1, 1030], vec![1, 1, 1, 1030]),
        (vec![2, 5, 6], vec![5, 1]),
        (vec![0, 4, 8], vec![1, 4, 8]),
        (vec![3, 0], vec![1, 0]),
    ];
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for (xs, cs) in &cases {
            let graph = one_node(k, &[xs.clone(), cs.clone(), cs.clone()], dtype);
            assert_eq!(
                executor_of_fused(&graph, k).as_deref(),
                Some(GENERATED_CPU),
                "{xs:?} x {cs:?}: the kernel should take it"
            );
            let inputs = vec![
                random(dtype, xs, &mut rng),
                random(dtype, cs, &mut rng),
                random(dtype, cs, &mut rng),
            ];
            let want = run(&graph, &reference(), &inputs);
            let got = run(&graph, &generated(), &inputs);
            let tol = match dtype {
                DType::F16 => 2e-2,
                DType::BF16 => 5e-2,
                _ => 2e-6,
            };
            assert_close(&format!("rotary {dtype} {xs:?} x {cs:?}"), &got, &want, tol);
        }
    }
    // The decomposition itself is rotate-half (checked by hand, full shapes).
    let (x, c, s) = (
        random(DType::F64, &[3, 6], &mut rng),
        random(DType::F64, &[3, 6], &mut rng),
        random(DType::F64, &[3, 6], &mut rng),
    );
    let graph = one_node(k, &[vec![3, 6], vec![3, 6], vec![3, 6]], DType::F64);
    let want = rotary_by_hand(&x.to_f64_vec(), &c.to_f64_vec(), &s.to_f64_vec(), 6);
    for stack in [reference(), generated()] {
        let got = run(&graph, &stack, &[x.clone(), c.clone(), s.clone()]).to_f64_vec();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() < 1e-12, "element {i}: {g} vs {w}");
        }
    }
}

#[test]
fn rotary_refuses_odd_rows_and_broadcast_x() {
    let k = &builtin::rotary_embedding::KERNEL;
    let mut rng = Lcg(5);
    // Odd last dimension and x broadcast along it: the checker refuses with a reason, the
    // node runs its decomposition, and the kernel itself returns an error (no panic).
    for (xs, cs, why) in [
        (vec![2, 3, 5], vec![1, 3, 5], "odd"),
        (vec![4, 1], vec![4, 1], "odd"),
        (vec![2, 1], vec![2, 8], "broadcast"),
    ] {
        let graph = one_node(k, &[xs.clone(), cs.clone(), cs.clone()], DType::F32);
        assert_ne!(
            executor_of_fused(&graph, k).as_deref(),
            Some(GENERATED_CPU),
            "{xs:?} x {cs:?}"
        );
        let inputs = vec![
            random(DType::F32, &xs, &mut rng),
            random(DType::F32, &cs, &mut rng),
            random(DType::F32, &cs, &mut rng),
        ];
        let want = run(&graph, &reference(), &inputs);
        let got = run(&graph, &generated(), &inputs);
        assert_close(&format!("rotary fallback {xs:?}"), &got, &want, 0.0);
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let err = (k.cpu)(&refs, &[], DType::F32).unwrap_err().to_string();
        assert!(
            err.contains(if why == "odd" { "even" } else { "broadcast" }),
            "{err}"
        );
    }
    // Odd rows through the decomposition are rotate-half with h = d / 2 rounded down.
    let x = Tensor::from_vec(vec![1, 5], vec![1f32, 2.0, 3.0, 4.0, 5.0]).unwrap();
    let one = Tensor::from_vec(vec![1, 5], vec![0f32; 5]).unwrap();
    let sin = Tensor::from_vec(vec![1, 5], vec![1f32; 5]).unwrap();
    let graph = one_node(k, &[vec![1, 5], vec![1, 5], vec![1, 5]], DType::F32);
    let got = run(&graph, &generated(), &[x, one, sin]);
    assert_eq!(got.to_f64_vec(), vec![-3.0, -4.0, -5.0, 1.0, 2.0]);
}

#[test]
fn rotary_nan_propagates_as_in_the_decomposition() {
    let k = &builtin::rotary_embedding::KERNEL;
    let graph = one_node(k, &[vec![2, 8], vec![1, 8], vec![1, 8]], DType::F32);
    let mut xv: Vec<f32> = (0..16).map(|i| i as f32 / 4.0 - 2.0).collect();
    xv[1] = f32::NAN; // first half of row 0: read by position 5 (rotated)
    xv[14] = f32::INFINITY; // second half of row 1: read (negated) by position 2 of row 1
    let x = Tensor::from_vec(vec![2, 8], xv).unwrap();
    let c = Tensor::from_vec(vec![1, 8], vec![1f32, 0.5, 0.0, -1.0, 2.0, 1.0, 0.25, 0.0]).unwrap();
    let s = Tensor::from_vec(vec![1, 8], vec![0f32, 1.0, 0.5, 1.0, -1.0, 0.0, 1.0, 2.0]).unwrap();
    let inputs = vec![x, c, s];
    let want = run(&graph, &reference(), &inputs);
    let got = run(&graph, &generated(), &inputs);
    assert_close("rotary NaN/inf", &got, &want, 1e-6);
    let w = want.to_f64_vec();
    assert!(w[1].is_nan() && w[5].is_nan(), "{w:?}");
    assert!(w[8 + 6].is_nan() || w[8 + 6].is_infinite(), "{w:?}");
    assert_eq!(w[8 + 2], f64::NEG_INFINITY, "{w:?}");
}

/// The rotate-half chain as the corpus Llama exports write it: slices on `axis` (`rank - 1`
/// or `-1`) with `end` (`d` or `i64::MAX`), then `neg`, `concat`, `mul` by sin, plus
/// `x * cos`, in the operand orders given.
fn llama_rotary(
    g: &Builder,
    x: graphrw::Value,
    cos: graphrw::Value,
    sin: graphrw::Value,
    (axis, end, swapped): (i64, i64, bool),
) -> graphrw::Value {
    let d = g
        .meta(x)
        .unwrap()
        .shape
        .dims()
        .last()
        .unwrap()
        .known()
        .unwrap() as i64;
    let lo = g.slice_with(x, axis, 0, d / 2, 1).unwrap();
    let hi = g.slice_with(x, axis, d / 2, end, 1).unwrap();
    let rot = g.concat_with(&[g.neg(hi).unwrap(), lo], axis).unwrap();
    if swapped {
        let xc = g.mul(cos, x).unwrap();
        let rs = g.mul(sin, rot).unwrap();
        g.add(rs, xc).unwrap()
    } else {
        let xc = g.mul(x, cos).unwrap();
        let rs = g.mul(rot, sin).unwrap();
        g.add(xc, rs).unwrap()
    }
}

#[test]
fn rotary_chains_are_fused_in_the_spellings_exporters_write() {
    let g = Builder::new();
    let meta = |s: [usize; 4]| TensorMeta::new(DType::F32, s);
    let q = g.input("q", meta([1, 4, 6, 8])).value();
    let kx = g.input("k", meta([1, 2, 6, 8])).value();
    let cos = g.input("cos", meta([1, 1, 6, 8])).value();
    let sin = g.input("sin", meta([1, 1, 6, 8])).value();
    let mut outs = Vec::new();
    for spelling in [
        (3, 8, false),
        (-1, i64::MAX, true),
        (3, i64::MAX, true),
        (-1, 8, false),
    ] {
        outs.push(g.var(llama_rotary(&g, q, cos, sin, spelling)));
        outs.push(g.var(llama_rotary(&g, kx, cos, sin, spelling)));
    }
    // Not rotate-half: halves swapped without the sign, and a split off the middle.
    let lo = g.slice_with(q, 3, 0, 4, 1).unwrap();
    let hi = g.slice_with(q, 3, 4, 8, 1).unwrap();
    let roll = g.concat_with(&[hi, lo], -1).unwrap();
    outs.push(
        g.var(
            g.add(g.mul(q, cos).unwrap(), g.mul(roll, sin).unwrap())
                .unwrap(),
        ),
    );
    let lo = g.slice_with(q, 3, 0, 3, 1).unwrap();
    let hi = g.slice_with(q, 3, 3, 8, 1).unwrap();
    let off = g.concat_with(&[g.neg(hi).unwrap(), lo], -1).unwrap();
    outs.push(
        g.var(
            g.add(g.mul(q, cos).unwrap(), g.mul(off, sin).unwrap())
                .unwrap(),
        ),
    );
    g.output(&outs).unwrap();
    let mut graph = g.finish();
    let before = graph.clone();
    let report = graphrw::generated::fuse_kernels(&mut graph).unwrap();
    assert_eq!(
        graph.nodes_with_op("fused.rotary_embedding").count(),
        8,
        "{report}\n{graph}"
    );
    // The two look-alikes stay as they are.
    assert_eq!(graph.nodes_with_op("concat").count(), 2, "{graph}");
    let mut rng = Lcg(3);
    let inputs = vec![
        random(DType::F32, &[1, 4, 6, 8], &mut rng),
        random(DType::F32, &[1, 2, 6, 8], &mut rng),
        random(DType::F32, &[1, 1, 6, 8], &mut rng),
        random(DType::F32, &[1, 1, 6, 8], &mut rng),
    ];
    let want = plan(&before, &reference()).unwrap().run(&inputs).unwrap().0;
    let p = plan(&graph, &generated()).unwrap();
    for n in p.graph().nodes_with_op("fused.rotary_embedding") {
        assert_eq!(p.executor_of(n), Some(GENERATED_CPU), "{p}");
    }
    let got = p.run(&inputs).unwrap().0;
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_close(&format!("output {i}"), g, w, 1e-6);
    }
}

#[test]
fn rotary_chains_over_odd_rows_fuse_and_run_their_decomposition() {
    let g = Builder::new();
    let x = g
        .input("x", TensorMeta::new(DType::F32, [2usize, 3, 7]))
        .value();
    let cos = g
        .input("cos", TensorMeta::new(DType::F32, [3usize, 7]))
        .value();
    let sin = g
        .input("sin", TensorMeta::new(DType::F32, [3usize, 7]))
        .value();
    let out = g.var(llama_rotary(&g, x, cos, sin, (2, i64::MAX, false)));
    g.output(&[out]).unwrap();
    let mut graph = g.finish();
    let before = graph.clone();
    graphrw::generated::fuse_kernels(&mut graph).unwrap();
    assert_eq!(
        graph.nodes_with_op("fused.rotary_embedding").count(),
        1,
        "{graph}"
    );
    let p = plan(&graph, &generated()).unwrap();
    assert!(!p.assignments().any(|(_, e)| e == GENERATED_CPU), "{p}");
    let mut rng = Lcg(8);
    let inputs = vec![
        random(DType::F32, &[2, 3, 7], &mut rng),
        random(DType::F32, &[3, 7], &mut rng),
        random(DType::F32, &[3, 7], &mut rng),
    ];
    let want = plan(&before, &reference()).unwrap().run(&inputs).unwrap().0;
    let got = p.run(&inputs).unwrap().0;
    assert_close("odd rows", &got[0], &want[0], 0.0);
}

#[test]
fn rotary_cuda_source_runs_by_rows_and_reads_rotated() {
    let k = &builtin::rotary_embedding::KERNEL;
    assert_eq!(k.cuda.launch, CudaLaunch::Rows);
    assert!(
        k.cuda.source.contains("((j + hh) % n)"),
        "{}",
        k.cuda.source
    );
    assert!(k.cuda.source.contains("j < hh ?"), "{}", k.cuda.source);
    // The vjp of cos (g * x) has no rotation; the others read rotated.
    let rotated: Vec<&str> = k
        .vjp
        .iter()
        .filter(|v| v.cuda.source.contains("% n)"))
        .map(|v| v.param)
        .collect();
    assert_eq!(rotated, ["x", "sin"]);
    assert_eq!(builtin::swiglu::KERNEL.cuda.launch, CudaLaunch::Elementwise);
}

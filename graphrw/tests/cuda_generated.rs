//! Every built-in generated kernel, forward and vjp, on the GPU (feature `cuda`): each
//! op is planned on the CUDA executor alone (it must take it), run on odd widths (even
//! ones for `rotate_half`) with broadcast operands, in f32, f16 and bf16, and compared
//! with the CPU kernel of the generated executor on the same inputs. Without a CUDA
//! device it prints `skipped: ...` and returns.
#![cfg(feature = "cuda")]

use std::sync::Arc;

use graphrw::exec::{generated_executor, plan, CudaExecutor, Executor, GENERATED_CPU};
use graphrw::generated::{builtin, FusedKernel};
use graphrw::ops::{AttrValue, OpDef};
use graphrw::{Builder, DType, Dim, Graph, Tensor, TensorMeta};

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

/// Broadcast parameters get broadcast shapes, like the fused_grad tests.
fn shape_of(param: &str, rows: usize, n: usize) -> Vec<usize> {
    match param {
        "weight" | "bias" => vec![n],
        "mask" | "cos" | "sin" => vec![1, n],
        _ => vec![rows, n],
    }
}

fn scalar_of(name: &str) -> f64 {
    match name {
        "eps" => 1e-3,
        "scale" => 0.5,
        _ => 1.0,
    }
}

/// One node of `op` over `names` (shapes by [`shape_of`]), and its inputs.
fn single_node(
    op: &'static OpDef,
    k: &FusedKernel,
    names: &[&str],
    rows: usize,
    n: usize,
    dtype: DType,
    seed: u64,
) -> (Graph, Vec<Tensor>) {
    let b = Builder::new();
    let mut rng = Lcg(seed);
    let mut xs = Vec::new();
    let ins: Vec<_> = names
        .iter()
        .map(|t| {
            let s = shape_of(t, rows, n);
            let v: Vec<f64> = (0..s.iter().product::<usize>())
                .map(|_| rng.next())
                .collect();
            xs.push(Tensor::from_f64_slice(dtype, &s, &v).unwrap());
            let dims: Vec<Dim> = s.into_iter().map(Dim::from).collect();
            b.input(t, TensorMeta::new(dtype, dims)).value()
        })
        .collect();
    let attrs: Vec<(&str, AttrValue)> = k
        .scalars
        .iter()
        .map(|s| (*s, AttrValue::Float(scalar_of(s))))
        .collect();
    let out = b.apply(op, &ins, &attrs).expect("node");
    b.output(&[b.var(out[0])]).unwrap();
    (b.finish(), xs)
}

fn tolerance(d: DType) -> f64 {
    match d {
        DType::F16 => 4e-3,
        DType::BF16 => 3e-2,
        _ => 1e-4,
    }
}

/// Runs `g` on `stack`, asserting every node ran on `executor`.
fn run_on(g: &Graph, stack: &[Arc<dyn Executor>], executor: &str, x: &[Tensor]) -> Tensor {
    let p = plan(g, stack).unwrap();
    let elsewhere: Vec<_> = p.assignments().filter(|(_, e)| *e != executor).collect();
    assert!(elsewhere.is_empty(), "not on {executor}: {p}");
    p.run(x).unwrap().0.remove(0)
}

#[test]
fn every_generated_kernel_and_vjp_matches_the_cpu_kernel_on_the_gpu() {
    let cuda = match CudaExecutor::new(0) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("skipped: no CUDA device: every_generated_kernel_and_vjp_matches_the_cpu_kernel_on_the_gpu: {e}");
            return;
        }
    };
    let gpu: Vec<Arc<dyn Executor>> = vec![Arc::new(cuda.clone())];
    let cpu: Vec<Arc<dyn Executor>> = vec![Arc::new(generated_executor())];
    let mut checked = 0;
    for k in builtin::ALL {
        let rotates =
            !k.rotate_inputs.is_empty() || k.vjp.iter().any(|v| !v.rotate_inputs.is_empty());
        let mut ops: Vec<(&'static OpDef, Vec<&str>)> = vec![(k.op, k.tensors.to_vec())];
        for v in k.vjp {
            let mut names = k.tensors.to_vec();
            names.push("g");
            ops.push((v.op, names));
        }
        for (op, names) in &ops {
            for (rows, n) in [(1, 1), (3, 7), (5, 33), (2, 301), (4, 1025)] {
                let n = if rotates { n + 1 } else { n };
                for dtype in [DType::F32, DType::F16, DType::BF16] {
                    let (g, x) = single_node(op, k, names, rows, n, dtype, 7 + n as u64);
                    let want = run_on(&g, &cpu, GENERATED_CPU, &x);
                    let got = run_on(&g, &gpu, cuda.name(), &x);
                    assert_eq!(got.shape(), want.shape(), "{}", op.name);
                    assert_eq!(got.dtype(), dtype, "{}", op.name);
                    let tol = tolerance(dtype);
                    for (i, (a, b)) in got
                        .to_f64_vec()
                        .into_iter()
                        .zip(want.to_f64_vec())
                        .enumerate()
                    {
                        assert!(
                            (a - b).abs() <= tol * (1.0 + b.abs()),
                            "{} {dtype} [{rows}, {n}] element {i}: GPU {a}, CPU {b}",
                            op.name
                        );
                    }
                    checked += 1;
                }
            }
        }
    }
    eprintln!("{checked} generated kernel runs matched the CPU kernels");
}

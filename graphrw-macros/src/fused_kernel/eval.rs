//! Evaluates a kernel's expression on sample rows (f64), to check at compile time that
//! the alternatives of a body compute the same function.

use super::ir::{Bin, Dag, Dt, Id, Node, Red, Un};
use super::walk::topo;

/// A small deterministic generator (no dependency).
pub struct Lcg(u64);

impl Lcg {
    pub fn new(seed: u64) -> Lcg {
        Lcg(seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407))
    }
    /// A value in `[lo, hi)`.
    pub fn next(&mut self, lo: f64, hi: f64) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        lo + (hi - lo) * ((self.0 >> 11) as f64 / (1u64 << 53) as f64)
    }
}

fn erf(x: f64) -> f64 {
    // Abramowitz-Stegun 7.1.26 is too coarse; use a series/continued fraction split.
    if x.abs() < 2.5 {
        let mut sum = x;
        let mut term = x;
        let x2 = x * x;
        for n in 1..200 {
            term *= -x2 / n as f64;
            let t = term / (2 * n + 1) as f64;
            sum += t;
            if t.abs() < 1e-17 {
                break;
            }
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        // erfc continued fraction
        let ax = x.abs();
        let mut f = 0.0;
        for k in (1..60).rev() {
            f = (k as f64 / 2.0) / (ax + f);
        }
        let erfc = (-ax * ax).exp() / std::f64::consts::PI.sqrt() / (ax + f);
        (1.0 - erfc).copysign(x)
    }
}

fn round(v: f64, dt: Dt) -> f64 {
    match dt {
        Dt::F32 => v as f32 as f64,
        Dt::F64 => v,
        // Half-precision rounding is not needed to compare alternatives.
        Dt::F16 | Dt::BF16 => v,
        Dt::Bool => (v != 0.0) as u8 as f64,
        Dt::I64 => v.trunc(),
    }
}

/// The output row for `inputs` (one row per tensor parameter, all of length `n`).
pub fn eval_row(dag: &Dag, root: Id, inputs: &[Vec<f64>], scalars: &[f64], n: usize) -> Vec<f64> {
    let mut vals: Vec<Option<Vec<f64>>> = vec![None; dag.nodes.len()];
    for id in topo(dag, root) {
        let get = |vals: &Vec<Option<Vec<f64>>>, i: Id| vals[i].clone().unwrap_or_default();
        let v: Vec<f64> = match dag.nodes[id] {
            Node::Input(k) => inputs[k].clone(),
            Node::Scalar(k) => vec![scalars[k]; n],
            Node::Lit(b) => vec![f64::from_bits(b); n],
            Node::Un(op, a) => get(&vals, a).into_iter().map(|x| un(op, x)).collect(),
            Node::Bin(op, a, b) => get(&vals, a)
                .into_iter()
                .zip(get(&vals, b))
                .map(|(x, y)| bin(op, x, y))
                .collect(),
            Node::Where(c, a, b) => {
                let (c, a, b) = (get(&vals, c), get(&vals, a), get(&vals, b));
                (0..n)
                    .map(|i| if c[i] != 0.0 { a[i] } else { b[i] })
                    .collect()
            }
            Node::Cast(a, dt) => get(&vals, a).into_iter().map(|x| round(x, dt)).collect(),
            Node::Rot(a) => {
                // concat([neg(a[h:]), a[:h]]) with h = n / 2.
                let a = get(&vals, a);
                let h = n / 2;
                (0..n)
                    .map(|j| if j < n - h { -a[j + h] } else { a[j - (n - h)] })
                    .collect()
            }
            Node::RotT(a) => {
                // concat([a[n - h:], neg(a[:n - h])]).
                let a = get(&vals, a);
                let h = n / 2;
                (0..n)
                    .map(|j| if j < h { a[j + n - h] } else { -a[j - h] })
                    .collect()
            }
            Node::InputRot(k) => {
                let h = n / 2;
                (0..n).map(|j| inputs[k][(j + h) % n.max(1)]).collect()
            }
            Node::HalfNeg(a) => {
                let a = get(&vals, a);
                (0..n)
                    .map(|j| if j < n / 2 { -a[j] } else { a[j] })
                    .collect()
            }
            Node::Reduce(r, a) => {
                let a = get(&vals, a);
                let v = match r {
                    Red::Sum => a.iter().sum(),
                    Red::Mean => a.iter().sum::<f64>() / n as f64,
                    Red::Amax => a.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
                };
                vec![v; n]
            }
        };
        vals[id] = Some(v);
    }
    vals[root].clone().unwrap_or_default()
}

pub fn un(op: Un, x: f64) -> f64 {
    match op {
        Un::Neg => -x,
        Un::Abs => x.abs(),
        Un::Reciprocal => 1.0 / x,
        Un::Sqrt => x.sqrt(),
        Un::Rsqrt => 1.0 / x.sqrt(),
        Un::Exp => x.exp(),
        Un::Log => x.ln(),
        Un::Sin => x.sin(),
        Un::Cos => x.cos(),
        Un::Erf => erf(x),
        Un::Tanh => x.tanh(),
        Un::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        Un::Relu => x.max(0.0),
        Un::Silu => x / (1.0 + (-x).exp()),
        Un::Gelu => 0.5 * x * (1.0 + erf(x * std::f64::consts::FRAC_1_SQRT_2)),
        Un::GeluTanh => {
            0.5 * x * (1.0 + (0.797_884_560_802_865_4 * (x + 0.044715 * x * x * x)).tanh())
        }
        Un::Not => (x == 0.0) as u8 as f64,
        Un::IsNan => x.is_nan() as u8 as f64,
    }
}

pub fn bin(op: Bin, x: f64, y: f64) -> f64 {
    let b = |c: bool| c as u8 as f64;
    match op {
        Bin::Add => x + y,
        Bin::Sub => x - y,
        Bin::Mul => x * y,
        Bin::Div => x / y,
        Bin::Pow => x.powf(y),
        Bin::Maximum => x.max(y),
        Bin::Minimum => x.min(y),
        Bin::Eq => b(x == y),
        Bin::Ne => b(x != y),
        Bin::Lt => b(x < y),
        Bin::Le => b(x <= y),
        Bin::Gt => b(x > y),
        Bin::Ge => b(x >= y),
        Bin::And => b(x != 0.0 && y != 0.0),
        Bin::Or => b(x != 0.0 || y != 0.0),
    }
}

/// True when every alternative agrees with the first on sample rows (relative 1e-6,
/// enough to tell a different function from a reordering of the same one).
pub fn alternatives_agree(
    dag: &Dag,
    roots: &[Id],
    ntensors: usize,
    nscalars: usize,
) -> Option<usize> {
    let mut rng = Lcg::new(7);
    for trial in 0..4 {
        // Odd and even rows (rotations split a row in halves).
        let n = 3 + trial;
        let inputs: Vec<Vec<f64>> = (0..ntensors)
            .map(|_| (0..n).map(|_| rng.next(0.2, 1.8)).collect())
            .collect();
        let scalars: Vec<f64> = (0..nscalars).map(|_| rng.next(0.2, 1.8)).collect();
        let want = eval_row(dag, roots[0], &inputs, &scalars, n);
        for (i, &r) in roots.iter().enumerate().skip(1) {
            let got = eval_row(dag, r, &inputs, &scalars, n);
            let same = want.iter().zip(&got).all(|(a, b)| {
                (a.is_nan() && b.is_nan())
                    || (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1e-300)
            });
            if !same {
                return Some(i);
            }
        }
    }
    None
}

//! Shared helpers of the op tests: deterministic inputs, index arithmetic for the
//! plain-loop references, and per-dtype tolerances.

use graphrw_kernels::testing::compare;
use graphrw_kernels::{DType, Tensor};

/// Every float dtype.
pub const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];
/// Every numeric (non-bool) dtype.
pub const NUMERIC: [DType; 6] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I64,
    DType::I32,
];

/// A small deterministic generator (SplitMix64).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform integer in `[lo, hi)`.
    pub fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % (hi - lo) as u64) as i64
    }
}

/// A tensor of random values suited to `dtype` (floats in [-3, 3), signed integers in
/// [-5, 5), unsigned ones in [0, 10), random bools).
pub fn rand_tensor(rng: &mut Rng, dtype: DType, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let vals: Vec<f64> = (0..n)
        .map(|_| match dtype {
            DType::Bool => rng.int(0, 2) as f64,
            // Non-negative for the unsigned types, so that the f64 references are exact
            // (a wrapped -1 is 2^64 - 1 in u64; wrapping is tested against onnxruntime).
            d if d.is_unsigned_int() => rng.int(0, 10) as f64,
            d if d.is_int() => rng.int(-5, 5) as f64,
            _ => rng.uniform(-3.0, 3.0),
        })
        .collect();
    Tensor::from_f64_slice(dtype, shape, &vals).unwrap()
}

/// Relative and absolute tolerance for results of `dtype`.
pub fn tol(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F32 => (1e-5, 1e-5),
        DType::F64 => (1e-10, 1e-10),
        DType::F16 => (1e-2, 1e-2),
        DType::BF16 => (2e-2, 2e-2),
        _ => (0.0, 0.0),
    }
}

/// Asserts `actual` has `shape`, `dtype` and values within tolerance of `expected`
/// (NaN matches NaN, infinities must match exactly).
pub fn assert_close(actual: &Tensor, shape: &[usize], dtype: DType, expected: &[f64], what: &str) {
    assert_eq!(actual.shape(), shape, "{what}: shape");
    assert_eq!(actual.dtype(), dtype, "{what}: dtype");
    let (rtol, atol) = tol(dtype);
    compare::assert_close(
        &actual.to_f64_vec(),
        expected,
        compare::Tol::new(atol, rtol),
        &format!("{what} ({dtype})"),
    );
}

/// The multi-index of flat position `i` in `shape`.
pub fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
    idx
}

/// The flat position of multi-index `idx` in `shape`.
pub fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (&i, &s)| acc * s + i)
}

/// The flat position in an operand of `shape` that a broadcast output index reads.
pub fn broadcast_index(out_idx: &[usize], shape: &[usize]) -> usize {
    let lead = out_idx.len() - shape.len();
    let idx: Vec<usize> = shape
        .iter()
        .enumerate()
        .map(|(i, &s)| if s == 1 { 0 } else { out_idx[lead + i] })
        .collect();
    ravel(&idx, shape)
}

/// The numpy broadcast of two shapes (reference implementation).
pub fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    let get = |s: &[usize], i: usize| {
        if i + s.len() >= r {
            s[i + s.len() - r]
        } else {
            1
        }
    };
    (0..r)
        .map(|i| {
            let (x, y) = (get(a, i), get(b, i));
            if x == y || y == 1 {
                Some(x)
            } else if x == 1 {
                Some(y)
            } else {
                None
            }
        })
        .collect()
}

/// Rounds a reference value the way storing it in `dtype` would.
pub fn round_to(dtype: DType, v: f64) -> f64 {
    Tensor::from_f64_slice(dtype, &[1], &[v])
        .unwrap()
        .to_f64_vec()[0]
}

//! The fused SDPA backward kernel against a plain f64 reference of the attention
//! gradients, over dtypes, lengths (incl. 1 and sizes that are not multiples of the
//! tiles), head dims, masks (bool, additive, fully masked rows), causal and grouped
//! heads, plus errors.

use graphrw_kernels::fused::sdpa_backward::sdpa_backward;
use graphrw_kernels::fused::{sdpa, FullyMaskedRows, SdpaOptions};
use graphrw_kernels::testing::compare;
use graphrw_kernels::{DType, Tensor};

/// SplitMix64: deterministic inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn tensor(&mut self, dtype: DType, shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        let vals: Vec<f64> = (0..n).map(|_| 4.0 * self.uniform() - 2.0).collect();
        Tensor::from_f64_slice(dtype, shape, &vals).unwrap()
    }
}

#[derive(Clone, Copy, Debug)]
enum MaskKind {
    None,
    /// Bool `[B, 1, Sq, Skv]`, query row 0 fully masked.
    Bool,
    /// Additive `[1, Hq, Sq, Skv]`.
    Additive,
}

/// `(dq, dk, dv)` in f64 the plain way, for rank-4 `[B, H, S, D]` inputs.
#[allow(clippy::too_many_arguments)]
fn reference(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    dout: &Tensor,
    mask: Option<&Tensor>,
    causal: bool,
    scale: f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let (b, hq, sq, d) = (qs[0], qs[1], qs[2], qs[3]);
    let (hkv, skv, dv) = (ks[1], ks[2], vs[3]);
    let (qa, ka, va, da) = (
        q.to_f64_vec(),
        k.to_f64_vec(),
        v.to_f64_vec(),
        dout.to_f64_vec(),
    );
    let ma = mask.map(|m| (m.shape().to_vec(), m.dtype(), m.to_f64_vec()));
    let (mut dq, mut dk, mut dvv) = (
        vec![0.0; qa.len()],
        vec![0.0; ka.len()],
        vec![0.0; va.len()],
    );
    for bi in 0..b {
        for h in 0..hq {
            let kh = bi * hkv + h / (hq / hkv);
            let qo = (bi * hq + h) * sq;
            let mut p = vec![0.0; sq * skv];
            for i in 0..sq {
                let mut row = vec![f64::NEG_INFINITY; skv];
                for (j, s) in row.iter_mut().enumerate() {
                    let dot: f64 = (0..d)
                        .map(|c| qa[(qo + i) * d + c] * ka[(kh * skv + j) * d + c])
                        .sum();
                    let mut x = dot * scale;
                    if causal && j > i {
                        x = f64::NEG_INFINITY;
                    }
                    if let Some((ms, dt, mv)) = &ma {
                        let mb = if ms[0] == 1 { 0 } else { bi };
                        let mh = if ms[1] == 1 { 0 } else { h };
                        let m = mv[((mb * ms[1] + mh) * sq + i) * skv + j];
                        if *dt == DType::Bool {
                            if m == 0.0 {
                                x = f64::NEG_INFINITY;
                            }
                        } else {
                            x += m;
                        }
                    }
                    *s = x;
                }
                let mx = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                if mx == f64::NEG_INFINITY {
                    continue; // fully masked: P = 0
                }
                let sum: f64 = row.iter().map(|x| (x - mx).exp()).sum();
                for j in 0..skv {
                    p[i * skv + j] = (row[j] - mx).exp() / sum;
                }
            }
            for i in 0..sq {
                let mut ds = vec![0.0; skv];
                for j in 0..skv {
                    let dp: f64 = (0..dv)
                        .map(|c| da[(qo + i) * dv + c] * va[(kh * skv + j) * dv + c])
                        .sum();
                    ds[j] = dp;
                    for c in 0..dv {
                        dvv[(kh * skv + j) * dv + c] += p[i * skv + j] * da[(qo + i) * dv + c];
                    }
                }
                let delta: f64 = (0..skv).map(|j| ds[j] * p[i * skv + j]).sum();
                for j in 0..skv {
                    let s = p[i * skv + j] * (ds[j] - delta) * scale;
                    for c in 0..d {
                        dq[(qo + i) * d + c] += s * ka[(kh * skv + j) * d + c];
                        dk[(kh * skv + j) * d + c] += s * qa[(qo + i) * d + c];
                    }
                }
            }
        }
    }
    (dq, dk, dvv)
}

fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-10,
        DType::F32 => 1e-4,
        DType::F16 => 5e-3,
        _ => 4e-2,
    }
}

fn assert_close(got: &Tensor, want: &[f64], dtype: DType, what: &str) {
    assert_eq!(got.dtype(), dtype, "{what}");
    let scale = want
        .iter()
        .filter(|x| x.is_finite())
        .fold(1.0f64, |m, x| m.max(x.abs()));
    let tol = compare::Tol::new(tolerance(dtype) * scale, 0.0);
    compare::assert_close(&got.to_f64_vec(), want, tol, what);
}

#[allow(clippy::too_many_arguments)]
fn run_case(
    dtype: DType,
    b: usize,
    hq: usize,
    hkv: usize,
    sq: usize,
    skv: usize,
    d: usize,
    causal: bool,
    mask: MaskKind,
) {
    let what = format!("{dtype} b{b} h{hq}/{hkv} sq{sq} skv{skv} d{d} causal={causal} {mask:?}");
    let mut rng = Rng((sq * 1000 + skv * 10 + d) as u64);
    let q = rng.tensor(dtype, &[b, hq, sq, d]);
    let k = rng.tensor(dtype, &[b, hkv, skv, d]);
    let v = rng.tensor(dtype, &[b, hkv, skv, d + 1]);
    let dout = rng.tensor(dtype, &[b, hq, sq, d + 1]);
    let m = match mask {
        MaskKind::None => None,
        MaskKind::Bool => {
            let vals: Vec<bool> = (0..b * sq * skv)
                .map(|i| {
                    let (row, col) = ((i / skv) % sq, i % skv);
                    row != 0 && (col == 0 || rng.uniform() < 0.6)
                })
                .collect();
            Some(Tensor::from_vec(vec![b, 1, sq, skv], vals).unwrap())
        }
        MaskKind::Additive => Some(rng.tensor(dtype, &[1, hq, sq, skv])),
    };
    let opts = SdpaOptions {
        is_causal: causal,
        scale: None,
        enable_gqa: hq != hkv,
        fully_masked_rows: FullyMaskedRows::Zero,
    };
    let out = sdpa(&q, &k, &v, m.as_ref(), &opts).unwrap();
    let g = sdpa_backward(&dout, &q, &k, &v, &out, m.as_ref(), &opts).unwrap();
    let scale = 1.0 / (d as f64).sqrt();
    let (dq, dk, dv) = reference(&q, &k, &v, &dout, m.as_ref(), causal, scale);
    assert_close(&g.dq, &dq, dtype, &format!("{what} dq"));
    assert_close(&g.dk, &dk, dtype, &format!("{what} dk"));
    assert_close(&g.dv, &dv, dtype, &format!("{what} dv"));
}

#[test]
fn matches_the_reference_over_sizes_masks_and_causal() {
    let sizes = [
        (1, 1, 1),
        (3, 5, 2),
        (64, 64, 8),
        (65, 130, 16),
        (130, 65, 7),
    ];
    for &(sq, skv, d) in &sizes {
        for causal in [false, true] {
            for mask in [MaskKind::None, MaskKind::Bool, MaskKind::Additive] {
                run_case(DType::F32, 1, 2, 2, sq, skv, d, causal, mask);
            }
        }
    }
}

#[test]
fn matches_the_reference_in_every_float_dtype_and_with_grouped_heads() {
    for dtype in [DType::F64, DType::F32, DType::F16, DType::BF16] {
        run_case(dtype, 2, 4, 2, 33, 70, 8, false, MaskKind::None);
        run_case(dtype, 1, 4, 1, 70, 33, 16, true, MaskKind::Bool);
        run_case(dtype, 2, 2, 2, 17, 17, 4, false, MaskKind::Additive);
    }
}

#[test]
fn fully_masked_rows_have_zero_gradient() {
    let mut rng = Rng(3);
    let q = rng.tensor(DType::F32, &[1, 1, 3, 4]);
    let k = rng.tensor(DType::F32, &[1, 1, 5, 4]);
    let v = rng.tensor(DType::F32, &[1, 1, 5, 4]);
    let dout = rng.tensor(DType::F32, &[1, 1, 3, 4]);
    let mask =
        Tensor::from_vec(vec![3, 5], (0..15).map(|i| i >= 5).collect::<Vec<bool>>()).unwrap();
    let opts = SdpaOptions {
        fully_masked_rows: FullyMaskedRows::Zero,
        ..Default::default()
    };
    let out = sdpa(&q, &k, &v, Some(&mask), &opts).unwrap();
    let g = sdpa_backward(&dout, &q, &k, &v, &out, Some(&mask), &opts).unwrap();
    let dq = g.dq.to_f64_vec();
    assert!(dq[..4].iter().all(|&x| x == 0.0), "{dq:?}");
    assert!(dq[4..].iter().any(|&x| x != 0.0));
    for t in [&g.dq, &g.dk, &g.dv] {
        assert!(t.to_f64_vec().iter().all(|x| x.is_finite()));
    }
}

#[test]
fn rank_2_and_rank_3_and_empty_keys() {
    let mut rng = Rng(9);
    for shape in [vec![5usize, 3], vec![2, 5, 3]] {
        let q = rng.tensor(DType::F64, &shape);
        let opts = SdpaOptions {
            is_causal: true,
            fully_masked_rows: FullyMaskedRows::Zero,
            ..Default::default()
        };
        let out = sdpa(&q, &q, &q, None, &opts).unwrap();
        let dout = rng.tensor(DType::F64, &shape);
        let g = sdpa_backward(&dout, &q, &q, &q, &out, None, &opts).unwrap();
        let mut four = vec![1usize; 4 - shape.len()];
        four.extend(&shape);
        let r4 = |t: &Tensor| Tensor::from_f64_slice(DType::F64, &four, &t.to_f64_vec()).unwrap();
        let (dq, dk, dv) = reference(
            &r4(&q),
            &r4(&q),
            &r4(&q),
            &r4(&dout),
            None,
            true,
            1.0 / 3f64.sqrt(),
        );
        assert_close(&g.dq, &dq, DType::F64, "dq");
        assert_close(&g.dk, &dk, DType::F64, "dk");
        assert_close(&g.dv, &dv, DType::F64, "dv");
    }
    let q = rng.tensor(DType::F32, &[1, 2, 4]);
    let k = rng.tensor(DType::F32, &[1, 0, 4]);
    let out = Tensor::zeros(DType::F32, &[1, 2, 4]);
    let g = sdpa_backward(&out, &q, &k, &k, &out, None, &SdpaOptions::default()).unwrap();
    assert!(g.dq.to_f64_vec().iter().all(|&x| x == 0.0));
    assert_eq!(g.dk.shape(), &[1, 0, 4]);
}

#[test]
fn bad_inputs_are_errors() {
    let mut rng = Rng(1);
    let q = rng.tensor(DType::F32, &[1, 2, 4, 8]);
    let kv = rng.tensor(DType::F32, &[1, 1, 4, 8]);
    let o = rng.tensor(DType::F32, &[1, 2, 4, 8]);
    let opts = SdpaOptions::default();
    let e = sdpa_backward(&o, &q, &kv, &kv, &o, None, &opts)
        .unwrap_err()
        .to_string();
    assert!(e.contains("enable_gqa"), "{e}");
    let short = rng.tensor(DType::F32, &[1, 2, 3, 8]);
    let e = sdpa_backward(&short, &q, &q, &q, &o, None, &opts)
        .unwrap_err()
        .to_string();
    assert!(e.contains("dout"), "{e}");
    let o64 = rng.tensor(DType::F64, &[1, 2, 4, 8]);
    assert!(sdpa_backward(&o, &q, &q, &q, &o64, None, &opts).is_err());
    let mask = rng.tensor(DType::F64, &[4, 4]);
    assert!(sdpa_backward(&o, &q, &q, &q, &o, Some(&mask), &opts).is_err());
    let mask = Tensor::from_vec(vec![3, 4], vec![true; 12]).unwrap();
    let e = sdpa_backward(&o, &q, &q, &q, &o, Some(&mask), &opts)
        .unwrap_err()
        .to_string();
    assert!(e.contains("broadcast"), "{e}");
}

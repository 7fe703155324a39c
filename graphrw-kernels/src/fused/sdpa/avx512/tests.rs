//! The AVX-512 micro-kernels against the AVX2 ones and plain loops.

use super::super::avx2;
use super::super::avx2::tests::{assert_probs_close, assert_state_close, ramp, running_state};
use super::*;
use half::bf16;

/// Whether the CPU lacks the features of [`available`] (then the tests say so and
/// return).
fn skip() -> bool {
    let has = available() && crate::cpu::Isa::Avx2Fma.is_available();
    if !has {
        println!("SKIPPED: the AVX-512 SDPA kernel tests need AVX-512 F, BW, BF16 and AVX2+FMA");
    }
    !has
}

/// `exp16` gives the AVX2 `exp8`'s results bit for bit (the same operations, 16
/// lanes), `exp16_shifted` `exp8_shifted`'s wherever that is not 0, exactly 0 at
/// `s = -inf` and a subnormal at most where that flushes to 0, over the
/// softmax's range (`s <= u`) and its edges (`-inf`, NaN, maxima near f32's limits, results
/// down to 0); the AVX2 forms are tested against f64.
#[test]
fn exp16_matches_avx2_exp8() {
    if skip() {
        return;
    }
    let mut xs: Vec<f32> = (-3000..=900).map(|i| i as f32 * 0.1).collect();
    xs.extend([
        f32::NEG_INFINITY,
        f32::NAN,
        -87.3,
        -87.4,
        -1e30,
        88.0,
        0.0,
        -0.0,
    ]);
    xs.extend([-103.0, -104.0, -104.5, -105.0, -200.0]);
    while !xs.len().is_multiple_of(16) {
        xs.push(0.25);
    }
    for u in [0.0f32, 3.7, -12.5, f32::MIN, f32::MAX] {
        let us = [u; 16];
        for chunk in xs.chunks(16) {
            let (mut a, mut b, mut c, mut e) = ([0f32; 16], [0f32; 16], [0f32; 16], [0f32; 16]);
            // SAFETY: the features were detected above; every array holds 16 floats.
            unsafe {
                let x = _mm512_loadu_ps(chunk.as_ptr());
                let uv = _mm512_loadu_ps(us.as_ptr());
                _mm512_storeu_ps(a.as_mut_ptr(), exp16(x));
                _mm512_storeu_ps(b.as_mut_ptr(), exp16_shifted(_mm512_add_ps(x, uv), uv));
                for h in 0..2 {
                    let x8 = _mm256_loadu_ps(chunk.as_ptr().add(8 * h));
                    let u8v = _mm256_set1_ps(u);
                    _mm256_storeu_ps(c.as_mut_ptr().add(8 * h), avx2::exp8(x8));
                    let s8 = _mm256_add_ps(x8, u8v);
                    _mm256_storeu_ps(e.as_mut_ptr().add(8 * h), avx2::exp8_shifted(s8, u8v));
                }
            }
            for i in 0..16 {
                assert_eq!(a[i].to_bits(), c[i].to_bits(), "exp16({})", chunk[i]);
                // The same bits but where the AVX2 form flushes to 0 (`2^n` with
                // `n = -127`): there a subnormal at most; 0 for `-inf`.
                let what = format!(
                    "exp16_shifted({} + {u}, {u}) = {}, exp8_shifted {}",
                    chunk[i], b[i], e[i]
                );
                if chunk[i] > 0.0 {
                    // Outside a softmax (`s > u`): not compared.
                } else if e[i] != 0.0 || chunk[i] == f32::NEG_INFINITY {
                    assert_eq!(b[i].to_bits(), e[i].to_bits(), "{what}");
                } else {
                    let tiny = (0.0..f32::MIN_POSITIVE).contains(&b[i]);
                    assert!(e[i] == 0.0 && tiny, "{what}");
                }
            }
        }
    }
}

/// `probs_to_pairs`: each pair is the two keys' probabilities rounded to bf16 (nearest
/// even), an odd last key paired with 0; columns past `ncols` untouched.
#[test]
fn probs_to_pairs_layout() {
    if skip() {
        return;
    }
    for (nk, ncols, lds) in [(1, 16, 16), (2, 16, 32), (7, 48, 48), (96, 96, 96)] {
        let p: Vec<f32> = ramp(nk * lds, nk).into_iter().map(|x| x * 3.0).collect();
        let mut pairs = vec![0xffffu16; nk.div_ceil(2) * lds * 2];
        // SAFETY: the features were detected above.
        unsafe { probs_to_pairs(nk, ncols, &p, lds, &mut pairs) };
        for jj in 0..nk.div_ceil(2) {
            for c in 0..lds {
                for e in 0..2 {
                    let j = 2 * jj + e;
                    let got = pairs[(jj * lds + c) * 2 + e];
                    let want = if c >= ncols {
                        0xffff
                    } else if j < nk {
                        bf16::from_f32(p[j * lds + c]).to_bits()
                    } else {
                        0
                    };
                    assert_eq!(got, want, "nk {nk} ncols {ncols}: key {j} column {c}");
                }
            }
        }
    }
}

/// The fused score + softmax pass against the score tile followed by the AVX2
/// softmax step (and, for bf16, `probs_to_pairs`), f32 and bf16 operands, in both
/// broadcast forms (the register form gives the in-FMA form's bits): key counts
/// that are not a multiple of the 8-key panel or of 2 (panel rows past `nk` hold
/// large keys that must not enter the max), one key, odd depths, strips of 1 to 3
/// panels, a stride wider than the columns, a fresh and a running state with some
/// columns still at `-inf`.
#[test]
fn scores_softmax_matches_separate_passes() {
    if skip() {
        return;
    }
    for (nk, d, ncols, lds) in [
        (1usize, 1usize, 16usize, 16usize),
        (5, 3, 16, 32),
        (8, 8, 32, 32),
        (9, 16, 48, 64),
        (95, 64, 96, 96),
        (96, 63, 96, 96),
        (13, 128, 80, 80),
    ] {
        let npan = nk.div_ceil(MR);
        let d2 = d.div_ceil(2);
        // Keys `[npan * 8][d]`, 40 past `nk`; queries `[ncols][d]`.
        let keys: Vec<f32> = (0..npan * MR * d)
            .map(|i| {
                if i / d >= nk {
                    40.0
                } else {
                    ramp(1, i)[0] * 2.0
                }
            })
            .collect();
        let qs: Vec<f32> = ramp(ncols * d, 5)
            .into_iter()
            .map(|x| x * 40.0 / d as f32)
            .collect();
        // Round to bf16 first so the f32 and bf16 forms see the same numbers.
        let keys: Vec<f32> = keys.iter().map(|&x| bf16::from_f32(x).to_f32()).collect();
        let qs: Vec<f32> = qs.iter().map(|&x| bf16::from_f32(x).to_f32()).collect();
        let mut kp = vec![0f32; npan * d * MR];
        let mut kh = vec![0u16; npan * d2 * MR * 2];
        for j in 0..npan * MR {
            for p in 0..d {
                kp[((j / MR) * d + p) * MR + j % MR] = keys[j * d + p];
                kh[(((j / MR) * d2 + p / 2) * MR + j % MR) * 2 + p % 2] =
                    bf16::from_f32(keys[j * d + p]).to_bits();
            }
        }
        let mut qp = vec![0f32; ncols * d];
        let mut qh = vec![0u16; ncols * d2 * 2];
        for i in 0..ncols {
            for p in 0..d {
                qp[((i / NR) * d + p) * NR + i % NR] = qs[i * d + p];
                qh[(((i / NR) * d2 + p / 2) * NR + i % NR) * 2 + p % 2] =
                    bf16::from_f32(qs[i * d + p]).to_bits();
            }
        }
        for bf in [false, true] {
            let ops = if bf {
                Operands::Bf16 {
                    kp: &kh,
                    qp: &qh,
                    d2,
                    scale: 1.0,
                }
            } else {
                Operands::F32 {
                    kp: &kp,
                    qp: &qp,
                    d,
                }
            };
            // Each (fresh, form)'s outputs; the register form's must be the in-FMA
            // form's bits.
            let mut by_form: Vec<(bool, Vec<u32>)> = Vec::new();
            for (fresh, reg) in [(true, false), (true, true), (false, false), (false, true)] {
                let (m, l) = running_state(ncols, fresh);
                let (mut s1, mut m1, mut l1, mut a1) = (
                    vec![0.0; npan * MR * lds],
                    m.clone(),
                    l.clone(),
                    vec![0.0; ncols],
                );
                let (mut s2, mut m2, mut l2, mut a2) = (s1.clone(), m, l, a1.clone());
                let mut p1 = vec![0u16; nk.div_ceil(2) * lds * 2];
                let mut p2 = p1.clone();
                // SAFETY: the features were detected above.
                unsafe {
                    scores(ops, reg, npan, ncols, &mut s1, lds);
                    avx2::softmax_update(&mut s1[..nk * lds], lds, nk, &mut m1, &mut l1, &mut a1);
                    if bf {
                        probs_to_pairs(nk, ncols, &s1, lds, &mut p1);
                    }
                    let out = if bf { Some(&mut p2[..]) } else { None };
                    scores_softmax(
                        ops, reg, nk, ncols, &mut s2, lds, out, &mut m2, &mut l2, &mut a2,
                    );
                }
                let what = format!(
                    "nk {nk} d {d} ncols {ncols} lds {lds} bf16 {bf} fresh {fresh} in register {reg}"
                );
                let bits: Vec<u32> = [&s1, &s2, &m2, &l2, &a2]
                    .into_iter()
                    .flat_map(|x| x.iter().map(|v| v.to_bits()))
                    .chain(p2.iter().map(|&x| x as u32))
                    .collect();
                match by_form.iter().find(|f| f.0 == fresh) {
                    Some((_, fma)) => assert!(fma == &bits, "{what}: not the in-FMA form's bits"),
                    None => by_form.push((fresh, bits)),
                }
                if bf {
                    for (i, (&x, &y)) in p1.iter().zip(&p2).enumerate() {
                        let (x, y) = (bf16::from_bits(x).to_f32(), bf16::from_bits(y).to_f32());
                        // One bf16 step apart at most (the f32 exps agree to 1e-6).
                        assert!(
                            (x - y).abs() <= x.abs() / 128.0,
                            "{what}: pair element {i}: {y} vs {x}"
                        );
                    }
                } else {
                    assert_probs_close(&what, (&s1, &s2), (nk, ncols, lds));
                }
                assert_state_close(&what, [(&m1, &m2), (&l1, &l2), (&a1, &a2)], ncols);
            }
        }
    }
}

/// `pack_row_pairs` against the layout written element by element, for key
/// panels (8 rows) and query panels (16 rows): odd and even depths, one row, full
/// and partial last panels; what it must not write keeps its old value.
#[test]
fn pack_row_pairs_layout() {
    if skip() {
        return;
    }
    for (n, d) in [
        (1usize, 1usize),
        (1, 2),
        (7, 3),
        (8, 64),
        (9, 5),
        (17, 31),
        (40, 128),
    ] {
        let rows: Vec<u16> = (0..n * d).map(|i| (i * 5 + 3) as u16).collect();
        let d2 = d.div_ceil(2);
        fn want_of<const R: usize>(rows: &[u16], n: usize, d: usize) -> Vec<u16> {
            let d2 = d.div_ceil(2);
            let mut w = vec![0x1234_u16; n.div_ceil(R) * d2 * R * 2];
            for i in 0..n {
                for p in 0..d {
                    w[(((i / R) * d2 + p / 2) * R + i % R) * 2 + p % 2] = rows[i * d + p];
                }
            }
            w
        }
        let mut got8 = vec![0x1234_u16; n.div_ceil(8) * d2 * 16];
        let mut got16 = vec![0x1234_u16; n.div_ceil(16) * d2 * 32];
        // SAFETY: the features were detected above.
        unsafe {
            pack_row_pairs::<8>(&rows, n, d, &mut got8);
            pack_row_pairs::<16>(&rows, n, d, &mut got16);
        }
        assert_eq!(got8, want_of::<8>(&rows, n, d), "R 8 n {n} d {d}");
        assert_eq!(got16, want_of::<16>(&rows, n, d), "R 16 n {n} d {d}");
    }
}

/// `pack_value_pairs` against the layout written element by element: value widths
/// below, at and past 16 columns (a scalar tail), an even and an odd key count (the
/// last key's partner left as it was), a block that starts at a later pair.
#[test]
fn pack_value_pairs_layout() {
    if skip() {
        return;
    }
    for (n, dv, j0, skv2) in [
        (1usize, 1usize, 0usize, 1usize),
        (2, 16, 0, 1),
        (5, 17, 2, 6),
        (8, 40, 8, 12),
        (96, 64, 0, 48),
    ] {
        let rows: Vec<u16> = (0..n * dv).map(|i| (i * 7 + 1) as u16).collect();
        let len = dv.div_ceil(NR) * skv2 * NR * 2;
        let mut want = vec![0xabcd_u16; len];
        for j in 0..n {
            for c in 0..dv {
                let jk = j0 + j;
                want[(((c / NR) * skv2 + jk / 2) * NR + c % NR) * 2 + jk % 2] = rows[j * dv + c];
            }
        }
        let mut got = vec![0xabcd_u16; len];
        // SAFETY: the features were detected above.
        unsafe { pack_value_pairs(&rows, n, dv, j0, skv2, &mut got) };
        assert_eq!(got, want, "n {n} dv {dv} j0 {j0} skv2 {skv2}");
    }
}

/// The value product, f32 and bf16, in both broadcast forms (the register form gives
/// the in-FMA form's bits), against a scalar sum (the bf16 form on
/// probabilities and values that bf16 holds exactly, so only the order of the f32
/// sums differs): odd key counts (a padded last pair whose value is infinite: the
/// masked load must drop it), one to eight 16-column panels, rows a multiple of 8.
#[test]
fn values_match_scalar() {
    if skip() {
        return;
    }
    for (nk, nrows, npan) in [
        (1usize, 8usize, 1usize),
        (3, 16, 2),
        (8, 8, 3),
        (17, 32, 4),
        (96, 96, 8),
        (95, 48, 5),
    ] {
        let (ldp, ldo) = (nrows + 16, npan * NR + 16);
        let pstride = nk + 3;
        let p: Vec<f32> = ramp(nk * ldp, 3)
            .into_iter()
            .map(|x| bf16::from_f32(x.abs()).to_f32())
            .collect();
        let v: Vec<f32> = ramp(npan * pstride * NR, 4)
            .into_iter()
            .map(|x| bf16::from_f32(x).to_f32())
            .collect();
        let alpha: Vec<f32> = ramp(nrows, 5).into_iter().map(|x| x + 1.0).collect();
        let o0: Vec<f32> = ramp(nrows * ldo, 6);
        let mut want = o0.clone();
        for i in 0..nrows {
            for c in 0..npan * NR {
                let mut acc = 0f64;
                for j in 0..nk {
                    acc += p[j * ldp + i] as f64 * v[((c / NR) * pstride + j) * NR + c % NR] as f64;
                }
                want[i * ldo + c] = (alpha[i] * o0[i * ldo + c]) + acc as f32;
            }
        }
        // bf16 forms: probability pairs and value pairs (rows past `nk`: infinite).
        let ps2 = pstride.div_ceil(2);
        let mut ph = vec![0u16; nk.div_ceil(2) * ldp * 2];
        for j in 0..nk {
            for i in 0..ldp {
                ph[((j / 2) * ldp + i) * 2 + j % 2] = bf16::from_f32(p[j * ldp + i]).to_bits();
            }
        }
        let mut by_form: [Option<Vec<f32>>; 2] = [None, None];
        let mut vh = vec![bf16::INFINITY.to_bits(); npan * ps2 * NR * 2];
        for cp in 0..npan {
            for j in 0..nk {
                for t in 0..NR {
                    vh[((cp * ps2 + j / 2) * NR + t) * 2 + j % 2] =
                        bf16::from_f32(v[(cp * pstride + j) * NR + t]).to_bits();
                }
            }
        }
        for (bf, reg) in [(false, false), (false, true), (true, false), (true, true)] {
            let mut o = o0.clone();
            let ops = if bf {
                ValueOperands::Bf16 { p: &ph, vp: &vh }
            } else {
                ValueOperands::F32 { p: &p, vp: &v }
            };
            let ps = if bf { ps2 } else { pstride };
            // SAFETY: the features were detected above.
            unsafe { values(ops, reg, nk, nrows, ldp, ps, npan, &alpha, &mut o, ldo) };
            // The register form gives the in-FMA form's bits.
            let key = if bf { 1 } else { 0 };
            match &by_form[key] {
                Some(fma) => assert!(
                    fma.iter().zip(&o).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "nk {nk} rows {nrows} panels {npan} bf16 {bf}: not the in-FMA form's bits"
                ),
                None => by_form[key] = Some(o.clone()),
            }
            for i in 0..nrows {
                for c in 0..ldo {
                    let (x, y) = (want[i * ldo + c], o[i * ldo + c]);
                    let ok = if c < npan * NR {
                        (x - y).abs() <= 1e-5 * (1.0 + x.abs())
                    } else {
                        y == o0[i * ldo + c]
                    };
                    assert!(
                        ok,
                        "nk {nk} rows {nrows} panels {npan} bf16 {bf}: o[{i}][{c}] {y} vs {x}"
                    );
                }
            }
        }
    }
}

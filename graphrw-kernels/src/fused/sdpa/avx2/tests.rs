//! The AVX2 micro-kernels against the generic loops and f64.

use super::super::tile::softmax_update_generic;

/// Deterministic values in `[-1, 1)`.
pub(in super::super) fn ramp(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (((i + seed * 7) * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect()
}

/// Whether a fused softmax step's value `y` agrees with the separate step's `x`.
fn close(x: f32, y: f32) -> bool {
    x == y || (x - y).abs() <= 1e-6 * x.abs().max(1.0)
}

/// The probability tiles `(separate, fused)` agree over `nk` keys by `ncols`
/// columns, rows `lds` apart.
pub(in super::super) fn assert_probs_close(
    what: &str,
    (s1, s2): (&[f32], &[f32]),
    (nk, ncols, lds): (usize, usize, usize),
) {
    for j in 0..nk {
        for c in 0..ncols {
            let (x, y) = (s1[j * lds + c], s2[j * lds + c]);
            assert!(close(x, y), "{what}: p[{j}][{c}] {y} vs {x}");
        }
    }
}

/// The running state `m`, `l` and `alpha` (each a `(separate, fused)` pair) agree
/// over `ncols` columns.
pub(in super::super) fn assert_state_close(what: &str, state: [(&[f32], &[f32]); 3], ncols: usize) {
    for ((x, y), name) in state.into_iter().zip(["m", "l", "alpha"]) {
        for c in 0..ncols {
            assert!(
                close(x[c], y[c]),
                "{what}: {name}[{c}] {} vs {}",
                y[c],
                x[c]
            );
        }
    }
}

/// A running softmax state `(m, l)` over `ncols` columns for the score-pass tests:
/// `fresh` as before the first key block (`-inf` maxima, zero sums), else as
/// after earlier blocks (finite maxima with every fifth still `-inf`, sums >= 1).
pub(in super::super) fn running_state(ncols: usize, fresh: bool) -> (Vec<f32>, Vec<f32>) {
    if fresh {
        return (vec![f32::NEG_INFINITY; ncols], vec![0.0; ncols]);
    }
    let m = ramp(ncols, 9)
        .into_iter()
        .enumerate()
        .map(|(i, x)| {
            if i % 5 == 0 {
                f32::NEG_INFINITY
            } else {
                x * 8.0
            }
        })
        .collect();
    let l = ramp(ncols, 11).into_iter().map(|x| x + 2.0).collect();
    (m, l)
}

/// The AVX2 exp against f64's `exp` (relative error <= 4e-7 over the range a
/// softmax uses and beyond), and its edges: exactly 0 below -87.34 and at `-inf`,
/// 1 at 0, NaN for NaN.
#[test]
fn exp8_matches_f64_exp() {
    if !crate::cpu::Isa::Avx2Fma.is_available() {
        println!("SKIPPED: exp8_matches_f64_exp needs AVX2 and FMA");
        return;
    }
    let mut xs: Vec<f32> = (-2000..=800).map(|i| i as f32 * 0.11).collect();
    xs.extend((0..4000).map(|i| -(i as f32) * 0.0023));
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
    while !xs.len().is_multiple_of(8) {
        xs.push(1.5);
    }
    for chunk in xs.chunks(8) {
        let mut got = [0f32; 8];
        // SAFETY: AVX2 and FMA detected above; `chunk` and `got` hold 8 floats.
        unsafe {
            let y = super::exp8(super::_mm256_loadu_ps(chunk.as_ptr()));
            super::_mm256_storeu_ps(got.as_mut_ptr(), y);
        }
        for (&x, &g) in chunk.iter().zip(&got) {
            let ok = if x.is_nan() {
                g.is_nan()
            } else if x < -87.336_55 {
                g == 0.0
            } else {
                let w = (x as f64).exp();
                ((g as f64) - w).abs() <= 4e-7 * w
            };
            assert!(ok, "exp8({x}) = {g}, exp gives {}", (x as f64).exp());
        }
    }
    let mut one = [0f32; 8];
    // SAFETY: AVX2 and FMA detected above; `one` holds 8 floats.
    unsafe { super::_mm256_storeu_ps(one.as_mut_ptr(), super::exp8(super::_mm256_setzero_ps())) };
    assert_eq!(one, [1.0; 8]);
}

/// `exp8_shifted(s, u)` against f64's `e^(s - u)` for column maxima `u` of both
/// signs and size, up to f32's limit (a finite-min mask), `s - u` from 0 to -90:
/// relative error within the polynomial's 3e-7 plus the two roundings of the
/// exponent (about 1e-7 per unit of `|t|`); tiny results (`e^(s - u)` below 1e-37)
/// only checked to be tiny; exactly 0 at `s = -inf` and far below `u`, NaN for NaN.
#[test]
fn exp8_shifted_matches_f64_exp() {
    if !crate::cpu::Isa::Avx2Fma.is_available() {
        println!("SKIPPED: exp8_shifted_matches_f64_exp needs AVX2 and FMA");
        return;
    }
    for u in [0.0f32, 3.7, -12.5, 80.0, 1e-3, f32::MIN, -1e38, f32::MAX] {
        let mut ss: Vec<f32> = (0..=9000).map(|i| u - i as f32 * 0.01).collect();
        ss.extend([u, f32::NEG_INFINITY, f32::NAN, u - 200.0]);
        while !ss.len().is_multiple_of(8) {
            ss.push(u - 0.5);
        }
        for chunk in ss.chunks(8) {
            let mut got = [0f32; 8];
            // SAFETY: AVX2 and FMA detected above; `chunk` and `got` hold 8 floats.
            unsafe {
                let y = super::exp8_shifted(
                    super::_mm256_loadu_ps(chunk.as_ptr()),
                    super::_mm256_set1_ps(u),
                );
                super::_mm256_storeu_ps(got.as_mut_ptr(), y);
            }
            for (&s, &g) in chunk.iter().zip(&got) {
                let x = s as f64 - u as f64;
                let w = x.exp();
                let ok = if s.is_nan() {
                    g.is_nan()
                } else if x < -88.5 {
                    g == 0.0
                } else if w < 1e-37 {
                    (0.0..2e-37).contains(&g)
                } else {
                    let tol = 3e-7 + 1e-7 * x.abs() * std::f64::consts::LOG2_E;
                    ((g as f64) - w).abs() <= tol * w
                };
                assert!(ok, "exp8_shifted({s}, u {u}) = {g}, exp gives {w}");
            }
        }
    }
}

/// The fused score + softmax pass against the score tile followed by the separate
/// softmax step: key counts that are not a multiple of the 6-key panel (rows of
/// the last panel past `nk` must not enter the max), one key, depths 1 to 64,
/// several query panels, a stride wider than the columns, a fresh state (`m =
/// -inf`) and a running one with some columns still at `-inf`.
#[test]
fn scores_softmax_packed_matches_separate_passes() {
    if !crate::cpu::Isa::Avx2Fma.is_available() {
        println!("SKIPPED: scores_softmax_packed_matches_separate_passes needs AVX2 and FMA");
        return;
    }
    use super::MR;
    for (nk, d, ncols, lds) in [
        (1usize, 1usize, 16usize, 16usize),
        (5, 3, 16, 32),
        (6, 8, 32, 32),
        (7, 16, 48, 64),
        (95, 64, 96, 96),
        (96, 64, 96, 96),
        (13, 128, 16, 16),
    ] {
        let npan = nk.div_ceil(MR);
        // Panel rows past `nk` hold keys of 40 (scores far above the real ones in
        // columns whose queries sum above 0): the separate step never sees them,
        // so a max that took them differs.
        let mut kp: Vec<f32> = ramp(npan * MR * d, nk + d)
            .into_iter()
            .map(|x| x * 2.0)
            .collect();
        for jp in 0..npan {
            for p in 0..d {
                for r in 0..MR {
                    if jp * MR + r >= nk {
                        kp[(jp * d + p) * MR + r] = 40.0;
                    }
                }
            }
        }
        let qp: Vec<f32> = ramp(ncols * d, 5)
            .into_iter()
            .map(|x| x * 40.0 / d as f32)
            .collect();
        for fresh in [true, false] {
            let (m, l) = running_state(ncols, fresh);
            let (mut s1, mut m1, mut l1, mut a1) = (
                vec![0.0; npan * MR * lds],
                m.clone(),
                l.clone(),
                vec![0.0; ncols],
            );
            let (mut s2, mut m2, mut l2, mut a2) = (s1.clone(), m, l, a1.clone());
            // SAFETY: AVX2 and FMA detected above.
            unsafe {
                super::scores_packed(npan, d, &kp, &qp, ncols, &mut s1, lds, true);
                super::softmax_update(&mut s1, lds, nk, &mut m1, &mut l1, &mut a1);
                super::scores_softmax_packed(
                    nk, d, &kp, &qp, ncols, &mut s2, lds, &mut m2, &mut l2, &mut a2,
                );
            }
            let what = format!("nk {nk} d {d} ncols {ncols} lds {lds} fresh {fresh}");
            assert_probs_close(&what, (&s1, &s2), (nk, ncols, lds));
            assert_state_close(&what, [(&m1, &m2), (&l1, &l2), (&a1, &a2)], ncols);
        }
    }
}

/// The AVX2 softmax step against the generic one on tiles of many shapes: odd key
/// counts (the two-row unrolling's tail), one key, widths of 8 to 48 columns, a
/// stride wider than the columns, running state from an earlier step, columns
/// still without a visible key (`m = -inf`), masked scores, and NaN.
#[test]
fn softmax_update_matches_generic() {
    if !crate::cpu::Isa::Avx2Fma.is_available() {
        println!("SKIPPED: softmax_update_matches_generic needs AVX2 and FMA");
        return;
    }
    for (nk, w, lds) in [
        (1, 8, 8),
        (2, 16, 16),
        (5, 48, 48),
        (96, 48, 48),
        (37, 24, 40),
    ] {
        for step in 0..3 {
            let mut s: Vec<f32> = ramp(nk * lds, step + nk)
                .into_iter()
                .map(|x| x * 6.0)
                .collect();
            // Column 0 all masked; column 3 masked but for the last key.
            for j in 0..nk {
                s[j * lds] = f32::NEG_INFINITY;
                if j + 1 < nk {
                    s[j * lds + 3] = f32::NEG_INFINITY;
                }
            }
            if step == 2 {
                s[(nk / 2) * lds + 5] = f32::NAN;
            }
            let mut m: Vec<f32> = ramp(w, 3).into_iter().map(|x| x * 4.0).collect();
            m[0] = f32::NEG_INFINITY;
            if step == 0 {
                m.iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
            }
            let l: Vec<f32> = if step == 0 {
                vec![0.0; w]
            } else {
                ramp(w, 4).into_iter().map(|x| x + 2.0).collect()
            };
            let (mut s1, mut m1, mut l1, mut a1) = (s.clone(), m.clone(), l.clone(), vec![0.0; w]);
            let mut scratch = vec![0.0; w];
            softmax_update_generic::<f32, true>(
                &mut s1,
                lds,
                nk,
                &mut m1,
                &mut l1,
                &mut a1,
                &mut scratch,
            );
            let (mut s2, mut m2, mut l2, mut a2) = (s, m, l, vec![0.0; w]);
            // SAFETY: AVX2 and FMA detected above.
            unsafe { super::softmax_update(&mut s2, lds, nk, &mut m2, &mut l2, &mut a2) };
            let what = format!("nk {nk} w {w} lds {lds} step {step}");
            let close = |x: f32, y: f32| {
                (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= 1e-6 * x.abs().max(1.0)
            };
            for j in 0..nk {
                for i in 0..w {
                    let (x, y) = (s1[j * lds + i], s2[j * lds + i]);
                    assert!(close(x, y), "{what}: p[{j}][{i}] {y} vs {x}");
                }
            }
            for i in 0..w {
                assert!(close(l1[i], l2[i]), "{what}: l[{i}] {} vs {}", l2[i], l1[i]);
                // A NaN score makes its column's sum (so its output row) NaN on both
                // paths; where the NaN lands in the max and alpha depends on the
                // order of the max, so only NaN-free columns compare those.
                if !l1[i].is_nan() {
                    assert!(
                        close(a1[i], a2[i]),
                        "{what}: alpha[{i}] {} vs {}",
                        a2[i],
                        a1[i]
                    );
                    assert!(close(m1[i], m2[i]), "{what}: m[{i}] {} vs {}", m2[i], m1[i]);
                }
            }
            if step == 2 {
                assert!(l2[5].is_nan(), "{what}: the NaN score's column");
            }
            // Column 0 has no visible key: nothing is added, and the old sum is
            // dropped (alpha = e^-inf = 0).
            assert_eq!(l2[0], 0.0, "{what}");
            assert!((0..nk).all(|j| s2[j * lds] == 0.0), "{what}");
        }
    }
}

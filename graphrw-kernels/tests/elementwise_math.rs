//! The vectorisable f32 `exp`, `erf`, `tanh` and `sigmoid` of generated kernels, against
//! f64 references over dense sweeps and special values.

use graphrw_kernels::elementwise::math;

/// Every multiple of 2^-10 in `[lo, hi]`.
fn sweep(lo: f32, hi: f32) -> impl Iterator<Item = f32> {
    let (a, b) = ((lo * 1024.0) as i32, (hi * 1024.0) as i32);
    (a..=b).map(|k| k as f32 / 1024.0)
}

/// Values every function must get right: zeros, infinities, NaN, tiny, huge.
const SPECIAL: &[f32] = &[
    0.0,
    -0.0,
    f32::INFINITY,
    f32::NEG_INFINITY,
    f32::MIN_POSITIVE,
    -f32::MIN_POSITIVE,
    1e-45,
    -1e-45,
    1e-30,
    -1e-30,
    1e-7,
    -1e-7,
    0.624_999_9,
    0.625,
    -0.625,
    0.999_999_94,
    1.0,
    -1.0,
    3.9,
    4.0,
    4.5,
    -4.5,
    9.0,
    50.0,
    -50.0,
    88.72,
    88.722_83,
    88.722_84,
    89.0,
    -87.3,
    -100.0,
    -103.9,
    -104.0,
    -110.0,
    1e30,
    -1e30,
    f32::MAX,
    f32::MIN,
];

/// Pseudo-random f32 bit patterns over the whole range (NaNs included).
fn random_bits(n: usize) -> impl Iterator<Item = f32> {
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    (0..n).map(move |_| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        f32::from_bits((s >> 32) as u32)
    })
}

fn all_inputs(lo: f32, hi: f32) -> Vec<f32> {
    sweep(lo, hi)
        .chain(SPECIAL.iter().copied())
        .chain(random_bits(20_000))
        .collect()
}

/// Checks NaN, infinities and the sign of zero against `reference` (rounded to f32),
/// and returns the largest (absolute, relative) errors over finite results.
fn errors(f: fn(f32) -> f32, reference: fn(f64) -> f64, xs: &[f32], name: &str) -> (f64, f64) {
    let (mut abs, mut rel) = (0f64, 0f64);
    for &x in xs {
        let got = f(x);
        let want = reference(x as f64);
        let want32 = want as f32;
        if want.is_nan() {
            assert!(got.is_nan(), "{name}({x:e}) = {got:e}, want NaN");
            continue;
        }
        if want32.is_infinite() || want32 == 0.0 {
            assert_eq!(
                got.to_bits(),
                want32.to_bits(),
                "{name}({x:e}) = {got:e}, want {want32:e}"
            );
            continue;
        }
        assert!(got.is_finite(), "{name}({x:e}) = {got:e}, want {want:e}");
        let e = (got as f64 - want).abs();
        abs = abs.max(e);
        if want.abs() >= f32::MIN_POSITIVE as f64 {
            rel = rel.max(e / want.abs());
        } else {
            // Subnormal results: within one step of the subnormal grid.
            assert!(e <= 1.5e-45, "{name}({x:e}) = {got:e}, want {want:e}");
        }
    }
    (abs, rel)
}

#[test]
fn exp_within_2_ulp() {
    let xs = all_inputs(-110.0, 90.0);
    let (_, rel) = errors(math::exp, f64::exp, &xs, "exp");
    println!("exp: max relative error {rel:e}");
    assert!(rel <= 2.5e-7, "exp max relative error {rel:e}");
    assert_eq!(math::exp(f32::NEG_INFINITY), 0.0);
    assert_eq!(math::exp(f32::INFINITY), f32::INFINITY);
    assert_eq!(math::exp(89.0), f32::INFINITY);
    assert_eq!(math::exp(0.0), 1.0);
    assert!(math::exp(f32::NAN).is_nan());
}

#[test]
fn tanh_within_2_ulp() {
    let xs = all_inputs(-10.0, 10.0);
    let (_, rel) = errors(math::tanh, f64::tanh, &xs, "tanh");
    println!("tanh: max relative error {rel:e}");
    assert!(rel <= 3e-7, "tanh max relative error {rel:e}");
    assert_eq!(math::tanh(f32::INFINITY), 1.0);
    assert_eq!(math::tanh(f32::NEG_INFINITY), -1.0);
    assert_eq!(math::tanh(-0.0).to_bits(), (-0.0f32).to_bits());
    assert!(math::tanh(f32::NAN).is_nan());
}

#[test]
fn erf_within_2e7_absolute() {
    let xs = all_inputs(-10.0, 10.0);
    let (abs, _) = errors(math::erf, libm::erf, &xs, "erf");
    println!("erf: max absolute error {abs:e}");
    assert!(abs <= 2e-7, "erf max absolute error {abs:e}");
    // Below 1 (where erf is below 0.85) the error is also small relative to the value.
    let small: Vec<f32> = xs.iter().copied().filter(|x| x.abs() < 1.0).collect();
    let (_, rel) = errors(math::erf, libm::erf, &small, "erf");
    println!("erf: max relative error below 1: {rel:e}");
    assert!(rel <= 3e-7, "erf max relative error below 1: {rel:e}");
    assert_eq!(math::erf(f32::INFINITY), 1.0);
    assert_eq!(math::erf(f32::NEG_INFINITY), -1.0);
    assert_eq!(math::erf(-0.0).to_bits(), (-0.0f32).to_bits());
    assert!(math::erf(f32::NAN).is_nan());
}

#[test]
fn sigmoid_within_3_ulp() {
    // Where e^-x overflows f32 (x < -88.72) sigmoid is 0, as the scalar f32 formula
    // gives, not the subnormal f64 value: those inputs are checked against that formula.
    let (xs, overflow): (Vec<f32>, Vec<f32>) = all_inputs(-110.0, 110.0)
        .into_iter()
        .partition(|&x| !(-(x as f64)).exp().is_finite() || (-x).exp().is_finite());
    assert!(overflow.len() > 1000);
    for x in overflow {
        let want = 1.0 / (1.0 + (-x).exp());
        assert_eq!(math::sigmoid(x).to_bits(), want.to_bits(), "sigmoid({x:e})");
    }
    let (_, rel) = errors(math::sigmoid, |x| 1.0 / (1.0 + (-x).exp()), &xs, "sigmoid");
    println!("sigmoid: max relative error {rel:e}");
    assert!(rel <= 4e-7, "sigmoid max relative error {rel:e}");
    assert_eq!(math::sigmoid(f32::INFINITY), 1.0);
    assert_eq!(math::sigmoid(f32::NEG_INFINITY), 0.0);
    assert!(math::sigmoid(f32::NAN).is_nan());
}

/// The fused multiply-add forms (what the generated kernels' AVX2+FMA build runs) keep
/// the plain forms' bounds and special values. (Without the `fma` target feature
/// `mul_add` is a library call: slow, but exact, so this checks the same arithmetic.)
#[test]
fn fma_forms_keep_the_bounds() {
    let xs = all_inputs(-110.0, 90.0);
    let (_, rel) = errors(math::exp_with::<true>, f64::exp, &xs, "exp fma");
    assert!(rel <= 2.5e-7, "exp fma max relative error {rel:e}");
    assert_eq!(math::exp_with::<true>(f32::NEG_INFINITY), 0.0);
    assert_eq!(math::exp_with::<true>(89.0), f32::INFINITY);
    assert_eq!(math::exp_with::<true>(0.0), 1.0);
    let xs = all_inputs(-10.0, 10.0);
    let (_, rel) = errors(math::tanh_with::<true>, f64::tanh, &xs, "tanh fma");
    assert!(rel <= 2.5e-7, "tanh fma max relative error {rel:e}");
    assert_eq!(math::tanh_with::<true>(-0.0).to_bits(), (-0.0f32).to_bits());
    let (abs, _) = errors(math::erf_with::<true>, libm::erf, &xs, "erf fma");
    assert!(abs <= 2e-7, "erf fma max absolute error {abs:e}");
    let small: Vec<f32> = xs.iter().copied().filter(|x| x.abs() < 1.0).collect();
    let (_, rel) = errors(math::erf_with::<true>, libm::erf, &small, "erf fma");
    assert!(rel <= 3e-7, "erf fma max relative error below 1: {rel:e}");
    assert_eq!(math::erf_with::<true>(f32::INFINITY), 1.0);
    assert!(math::erf_with::<true>(f32::NAN).is_nan());
    // Where e^-x overflows, sigmoid is 0 rather than subnormal (see above): left out.
    let xs: Vec<f32> = all_inputs(-80.0, 80.0)
        .into_iter()
        .filter(|x| x.is_nan() || x.abs() < 80.0)
        .collect();
    let (_, rel) = errors(
        math::sigmoid_with::<true>,
        |x| 1.0 / (1.0 + (-x).exp()),
        &xs,
        "sigmoid fma",
    );
    assert!(rel <= 3.5e-7, "sigmoid fma max relative error {rel:e}");
}

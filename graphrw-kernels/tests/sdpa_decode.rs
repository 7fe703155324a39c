//! The fused SDPA's decode path (few query rows over a long key/value cache, work split
//! over key blocks) against the unfused reference `cpu::sdpa_reference` and against the
//! general kernel: cache lengths around the block sizes, 1 to 16 query rows, grouped
//! heads (32 query heads over 32, 8, 4 and 1 key/value heads), bool and additive masks,
//! key padding, fully masked rows, causal, f32/f16/bf16, at each instruction set cap.

use graphrw_kernels::cpu::Isa;
use graphrw_kernels::fused::sdpa::{
    sdpa_tuned, selected_kernel_for, SdpaKernel, DECODE_FEW_QUERIES, DECODE_MAX_QUERIES,
    DECODE_MIN_KEYS, DECODE_MIN_KEYS_FEW,
};
use graphrw_kernels::fused::{FullyMaskedRows, SdpaOptions};
use graphrw_kernels::testing::compare;
use graphrw_kernels::{cpu, DType, KernelOptions, SdpaTuning, Tensor};

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

    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn tensor(&mut self, dtype: DType, shape: &[usize], lo: f64, hi: f64) -> Tensor {
        let n: usize = shape.iter().product();
        let vals: Vec<f64> = (0..n).map(|_| self.uniform(lo, hi)).collect();
        Tensor::from_f64_slice(dtype, shape, &vals).unwrap()
    }
}

/// The decode path at any cache length, at the instruction set cap `isa` (`None`: the
/// best this CPU has), with or without the AVX2/AVX-512 tiles (`micro`; without, the
/// portable loops compiled for AVX2+FMA).
fn decode_options((isa, micro): Cap) -> KernelOptions {
    let mut t = SdpaTuning::default()
        .with_decode_min_keys(1)
        .with_micro_kernels(micro);
    if let Some(isa) = isa {
        t = t.with_max_isa(isa);
    }
    KernelOptions::default().with_sdpa(t)
}

/// An instruction set cap and the micro-tiles switch (see [`decode_options`]).
type Cap = (Option<Isa>, bool);

/// The general kernel (decode path off).
fn general_options() -> KernelOptions {
    KernelOptions::default().with_sdpa(SdpaTuning::default().with_decode(false))
}

/// The instruction set caps every case runs at: the CPU's best (AVX-512 tiles where it
/// has AVX-512), AVX2, the portable loops compiled for AVX2+FMA, and the portable
/// loops (each only where the CPU has it: a cap above the CPU's is the CPU's).
const CAPS: [Cap; 4] = [
    (None, true),
    (Some(Isa::Avx2Fma), true),
    (Some(Isa::Avx2Fma), false),
    (Some(Isa::Baseline), true),
];

/// `(atol, rtol)` as the general kernel's tests: absolute error relative to the
/// output's largest magnitude, and relative error per element.
fn tolerance(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F32 => (1e-5, 1e-4),
        DType::F16 => (2e-3, 2e-3),
        _ => (2e-2, 2e-2),
    }
}

/// Asserts `got` matches `want` (NaN where `want` is NaN).
fn assert_close(got: &Tensor, want: &Tensor, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    let (atol, rtol) = tolerance(want.dtype());
    let w = want.to_f64_vec();
    let scale = w
        .iter()
        .filter(|x| x.is_finite())
        .fold(1.0f64, |m, x| m.max(x.abs()));
    let tol = compare::Tol::new(atol * scale, rtol);
    compare::assert_close_tensor(got, want, tol, what);
}

/// The reference with NaN rows (fully masked) replaced by zeros.
fn nan_to_zero(t: &Tensor) -> Tensor {
    let v: Vec<f64> = t
        .to_f64_vec()
        .into_iter()
        .map(|x| if x.is_nan() { 0.0 } else { x })
        .collect();
    Tensor::from_f64_slice(t.dtype(), t.shape(), &v).unwrap()
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum MaskKind {
    None,
    /// Bool `[B, 1, 1, Skv]` (key padding); batch entry 1 masks every key.
    Padding,
    /// Bool `[Sq, Skv]`; query row 1 masks every key.
    Square,
    /// Additive `[B, Hq, Sq, Skv]` with `-inf` and `-1e9` entries; the first row is all
    /// `-inf`.
    Additive,
}

#[derive(Clone, Copy, Debug)]
struct Case {
    dtype: DType,
    b: usize,
    hq: usize,
    hkv: usize,
    sq: usize,
    skv: usize,
    d: usize,
    mask: MaskKind,
    causal: bool,
}

fn mask_of(c: &Case, rng: &mut Rng) -> Option<Tensor> {
    let keep = |rng: &mut Rng, j: usize| j == 0 || rng.uniform(0.0, 1.0) < 0.7;
    match c.mask {
        MaskKind::None => None,
        MaskKind::Padding => {
            let vals: Vec<bool> = (0..c.b * c.skv)
                .map(|i| i / c.skv != 1 && keep(rng, i % c.skv))
                .collect();
            Some(Tensor::from_vec(vec![c.b, 1, 1, c.skv], vals).unwrap())
        }
        MaskKind::Square => {
            let vals: Vec<bool> = (0..c.sq * c.skv)
                .map(|i| i / c.skv != 1 && keep(rng, i % c.skv))
                .collect();
            Some(Tensor::from_vec(vec![c.sq, c.skv], vals).unwrap())
        }
        MaskKind::Additive => {
            let shape = [c.b, c.hq, c.sq, c.skv];
            let n: usize = shape.iter().product();
            let vals: Vec<f64> = (0..n)
                .map(|i| match (i < c.skv, i % c.skv, rng.next() % 8) {
                    (true, _, _) => f64::NEG_INFINITY,
                    (_, 0, _) => 0.5,
                    (_, _, 0) => -1e9,
                    (_, _, 1) => f64::NEG_INFINITY,
                    _ => rng.uniform(-3.0, 1.0),
                })
                .collect();
            Some(Tensor::from_f64_slice(c.dtype, &shape, &vals).unwrap())
        }
    }
}

/// Runs one case on the decode path at every instruction set cap in `caps`, against the
/// reference (no causal mask with a mask: the reference refuses the two together) or
/// the general kernel, with fully masked rows both NaN and zero.
fn check(c: Case, seed: u64, caps: &[Cap]) {
    let mut rng = Rng(seed);
    let q = rng.tensor(c.dtype, &[c.b, c.hq, c.sq, c.d], -2.0, 2.0);
    let k = rng.tensor(c.dtype, &[c.b, c.hkv, c.skv, c.d], -2.0, 2.0);
    let v = rng.tensor(c.dtype, &[c.b, c.hkv, c.skv, c.d], -1.0, 1.0);
    let mask = mask_of(&c, &mut rng);
    let gqa = c.hq != c.hkv;
    let mut opts = SdpaOptions {
        is_causal: c.causal,
        scale: None,
        enable_gqa: gqa,
        fully_masked_rows: FullyMaskedRows::Nan,
    };
    let want = if c.causal && mask.is_some() {
        sdpa_tuned(&q, &k, &v, mask.as_ref(), &opts, &general_options()).unwrap()
    } else {
        cpu::sdpa_reference(&q, &k, &v, mask.as_ref(), c.causal, None, gqa).unwrap()
    };
    for &cap in caps {
        let kernel = decode_options(cap);
        assert_eq!(
            selected_kernel_for(c.dtype, c.sq, c.skv, &kernel),
            SdpaKernel::Decode
        );
        let what = format!("{c:?} at {:?}, tiles {}", kernel.sdpa_isa(), cap.1);
        opts.fully_masked_rows = FullyMaskedRows::Nan;
        let got = sdpa_tuned(&q, &k, &v, mask.as_ref(), &opts, &kernel).unwrap();
        assert_close(&got, &want, &what);
        if c.mask != MaskKind::None {
            opts.fully_masked_rows = FullyMaskedRows::Zero;
            let got = sdpa_tuned(&q, &k, &v, mask.as_ref(), &opts, &kernel).unwrap();
            assert_close(&got, &nan_to_zero(&want), &format!("{what}, zero rows"));
        }
    }
}

/// Cache lengths around the key tiles and blocks.
const CACHES: [usize; 7] = [1, 2, 63, 64, 65, 1023, 4097];
/// Query rows.
const QUERIES: [usize; 4] = [1, 2, 5, 16];
/// Query and key/value heads: grouped 1, 4, 8 and 32 to 1.
const HEADS: [(usize, usize); 4] = [(32, 32), (32, 8), (32, 4), (32, 1)];
/// Masks and causal, each with every cache length and query count.
const MASKS: [(MaskKind, bool); 6] = [
    (MaskKind::None, false),
    (MaskKind::None, true),
    (MaskKind::Padding, false),
    (MaskKind::Square, false),
    (MaskKind::Additive, false),
    (MaskKind::Padding, true),
];

/// Every cache length, query count, mask and dtype; the head grouping, head size and
/// batch rotate. The long caches run at the CPU's best instruction set only, the others
/// at every cap.
fn grid(dtype: DType, seed0: u64) {
    let mut n = seed0;
    for &skv in &CACHES {
        for &sq in &QUERIES {
            for &(mask, causal) in &MASKS {
                let (hq, hkv) = HEADS[(n % 4) as usize];
                let d = if (n / 4).is_multiple_of(2) { 64 } else { 128 };
                let case = Case {
                    dtype,
                    b: if mask == MaskKind::Padding || skv < 1000 {
                        2
                    } else {
                        1
                    },
                    hq,
                    hkv,
                    sq,
                    skv,
                    d,
                    mask,
                    causal,
                };
                let caps: &[Cap] = if skv > 1000 { &CAPS[..1] } else { &CAPS };
                check(case, n, caps);
                n += 1;
            }
        }
    }
}

#[test]
fn grid_f32() {
    grid(DType::F32, 0);
}

#[test]
fn grid_f16() {
    grid(DType::F16, 1000);
}

#[test]
fn grid_bf16() {
    grid(DType::BF16, 2000);
}

/// The long caches at the AVX2 and portable caps, and every grouping at both head
/// sizes, on fewer combinations.
#[test]
fn long_caches_at_lower_caps_and_every_grouping() {
    let mut n = 5000u64;
    for &(hq, hkv) in &HEADS {
        for d in [64, 128] {
            for (sq, skv, mask) in [
                (1, 4097, MaskKind::Padding),
                (16, 1023, MaskKind::Additive),
                (5, 300, MaskKind::None),
            ] {
                let case = Case {
                    dtype: if n.is_multiple_of(2) {
                        DType::F32
                    } else {
                        DType::BF16
                    },
                    b: 2,
                    hq,
                    hkv,
                    sq,
                    skv,
                    d,
                    mask,
                    causal: false,
                };
                check(case, n, &CAPS[1..]);
                n += 1;
            }
        }
    }
}

/// The default options take the decode path exactly at its sizes (and not for f64),
/// and the decode-off option, the general kernel's forced paths and packing off never.
#[test]
fn decode_path_is_selected_at_its_sizes() {
    let base = KernelOptions::default();
    let sel = |dtype, sq, skv, o: &KernelOptions| selected_kernel_for(dtype, sq, skv, o);
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        assert_eq!(
            sel(dtype, DECODE_MAX_QUERIES, DECODE_MIN_KEYS, &base),
            SdpaKernel::Decode
        );
        assert_eq!(sel(dtype, 1, 1 << 20, &base), SdpaKernel::Decode);
        assert_ne!(
            sel(dtype, DECODE_MAX_QUERIES + 1, 4096, &base),
            SdpaKernel::Decode
        );
        let few = DECODE_FEW_QUERIES;
        assert_ne!(
            sel(dtype, few + 1, DECODE_MIN_KEYS - 1, &base),
            SdpaKernel::Decode
        );
        assert_eq!(
            sel(dtype, few, DECODE_MIN_KEYS_FEW, &base),
            SdpaKernel::Decode
        );
        assert_ne!(
            sel(dtype, 1, DECODE_MIN_KEYS_FEW - 1, &base),
            SdpaKernel::Decode
        );
        assert_ne!(sel(dtype, 1, 4096, &general_options()), SdpaKernel::Decode);
        let no_pack = base.with_sdpa(SdpaTuning::default().with_pack(false));
        assert_ne!(sel(dtype, 1, 4096, &no_pack), SdpaKernel::Decode);
        assert_eq!(
            sel(dtype, 1, 1, &decode_options((None, true))),
            SdpaKernel::Decode
        );
    }
    assert_ne!(sel(DType::F64, 1, 4096, &base), SdpaKernel::Decode);
}

/// The default options' decode path gives the general kernel's results, on rank-3
/// operands with a scale of their own, and errors as it does on bad shapes and masks.
#[test]
fn default_options_match_the_general_kernel_and_errors() {
    let mut rng = Rng(77);
    let (hq, sq, skv, d, dv) = (6, 3, 700, 40, 24);
    let q = rng.tensor(DType::F32, &[hq, sq, d], -2.0, 2.0);
    let k = rng.tensor(DType::F32, &[2, skv, d], -2.0, 2.0);
    let v = rng.tensor(DType::F32, &[2, skv, dv], -1.0, 1.0);
    let opts = SdpaOptions {
        scale: Some(0.3),
        enable_gqa: true,
        ..SdpaOptions::default()
    };
    let base = KernelOptions::default();
    assert_eq!(
        selected_kernel_for(DType::F32, sq, skv, &base),
        SdpaKernel::Decode
    );
    let got = sdpa_tuned(&q, &k, &v, None, &opts, &base).unwrap();
    let want = sdpa_tuned(&q, &k, &v, None, &opts, &general_options()).unwrap();
    assert_close(&got, &want, "rank 3, D != Dv, scale 0.3");
    let reference = cpu::sdpa_reference(&q, &k, &v, None, false, Some(0.3), true).unwrap();
    assert_close(&got, &reference, "rank 3 against the reference");

    // Errors, as the general kernel's.
    let no_gqa = SdpaOptions::default();
    assert!(sdpa_tuned(&q, &k, &v, None, &no_gqa, &base).is_err());
    let bad_mask = Tensor::from_vec(vec![sq, skv + 1], vec![true; sq * (skv + 1)]).unwrap();
    assert!(sdpa_tuned(&q, &k, &v, Some(&bad_mask), &opts, &base).is_err());
    let f16_mask = rng.tensor(DType::F16, &[sq, skv], -1.0, 0.0);
    assert!(sdpa_tuned(&q, &k, &v, Some(&f16_mask), &opts, &base).is_err());
}

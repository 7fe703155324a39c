//! Attention over a key/value cache with spare capacity (`fused::sdpa_prefix`): the
//! first `keys` rows of each K/V head are the keys, the rest (NaN here, so a read of
//! them would show) is never read. Every kernel path (the decode path at each
//! instruction set cap, the general kernel packed and in place) gives bit for bit what
//! it gives on the compact K/V, over grouped heads, masks, causal, f32/f16/bf16/f64.

use graphrw_kernels::cpu::Isa;
use graphrw_kernels::fused::sdpa::sdpa_tuned;
use graphrw_kernels::fused::{sdpa_prefix, SdpaOptions};
use graphrw_kernels::{DType, KernelOptions, SdpaTuning, Tensor};

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

    fn values(&mut self, n: usize) -> Vec<f64> {
        (0..n)
            .map(|_| (self.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0)
            .collect()
    }
}

/// `[b, h, rows, d]` values as a cache of `cap` rows a head: the first `rows` of each
/// head are `vals`, the spare ones NaN.
fn with_capacity(
    dtype: DType,
    b: usize,
    h: usize,
    rows: usize,
    cap: usize,
    d: usize,
    vals: &[f64],
) -> Tensor {
    let mut out = vec![f64::NAN; b * h * cap * d];
    for bh in 0..b * h {
        let src = &vals[bh * rows * d..(bh + 1) * rows * d];
        out[bh * cap * d..bh * cap * d + rows * d].copy_from_slice(src);
    }
    Tensor::from_f64_slice(dtype, &[b, h, cap, d], &out).unwrap()
}

/// The kernel options each case runs under: the decode path at each instruction set
/// cap (from one key on), and the general kernel packed and in place.
fn paths() -> Vec<(&'static str, KernelOptions)> {
    let decode = |isa: Isa| {
        KernelOptions::default().with_sdpa(
            SdpaTuning::default()
                .with_decode_min_keys(1)
                .with_choose(false)
                .with_max_isa(isa),
        )
    };
    let general = |pack: bool| {
        KernelOptions::default().with_sdpa(
            SdpaTuning::default()
                .with_decode(false)
                .with_choose(false)
                .with_pack(pack),
        )
    };
    vec![
        ("decode avx512", decode(Isa::Avx512)),
        ("decode avx2", decode(Isa::Avx2Fma)),
        ("decode baseline", decode(Isa::Baseline)),
        ("general packed", general(true)),
        ("general in place", general(false)),
        (
            "general packed avx2",
            general(true).with_max_isa(Isa::Avx2Fma),
        ),
        ("measured choice", KernelOptions::default()),
    ]
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_f64_vec().iter().map(|x| x.to_bits()).collect()
}

#[test]
fn a_cache_with_spare_rows_gives_the_compact_results_bit_for_bit() {
    let mut rng = Rng(11);
    let mut cases = 0;
    for dtype in [DType::F32, DType::F16, DType::BF16, DType::F64] {
        for &(hq, hkv) in &[(4usize, 4usize), (8, 2), (8, 1)] {
            for &(sq, keys, spare) in &[
                (1usize, 1usize, 1usize),
                (1, 65, 63),
                (1, 200, 56),
                (3, 64, 64),
                (16, 130, 126),
                (20, 40, 8),
            ] {
                for (causal, masked) in [(false, false), (true, false), (false, true)] {
                    let (b, d, dv) = (2, 16, 8);
                    let cap = keys + spare;
                    let q = Tensor::from_f64_slice(
                        dtype,
                        &[b, hq, sq, d],
                        &rng.values(b * hq * sq * d),
                    )
                    .unwrap();
                    let kv = rng.values(b * hkv * keys * d);
                    let vv = rng.values(b * hkv * keys * dv);
                    let k = Tensor::from_f64_slice(dtype, &[b, hkv, keys, d], &kv).unwrap();
                    let v = Tensor::from_f64_slice(dtype, &[b, hkv, keys, dv], &vv).unwrap();
                    let kc = with_capacity(dtype, b, hkv, keys, cap, d, &kv);
                    let vc = with_capacity(dtype, b, hkv, keys, cap, dv, &vv);
                    let mask = masked.then(|| {
                        let m: Vec<bool> = (0..b * sq * keys).map(|i| i % 7 != 3).collect();
                        Tensor::from_vec(vec![b, 1, sq, keys], m).unwrap()
                    });
                    let opts = SdpaOptions {
                        is_causal: causal,
                        enable_gqa: hq != hkv,
                        ..Default::default()
                    };
                    for (name, kernel) in paths() {
                        let what = format!(
                            "{dtype} hq={hq} hkv={hkv} sq={sq} keys={keys} cap={cap} causal={causal} masked={masked}, {name}"
                        );
                        let want = sdpa_tuned(&q, &k, &v, mask.as_ref(), &opts, &kernel).unwrap();
                        let got = sdpa_prefix(&q, &kc, &vc, keys, mask.as_ref(), &opts, &kernel)
                            .unwrap_or_else(|e| panic!("{what}: {e}"));
                        assert_eq!(got.shape(), want.shape(), "{what}");
                        assert_eq!(bits(&got), bits(&want), "{what}");
                        cases += 1;
                    }
                }
            }
        }
    }
    assert_eq!(cases, 4 * 3 * 6 * 3 * 7);
}

#[test]
fn more_keys_than_the_cache_holds_is_an_error() {
    let q = Tensor::zeros(DType::F32, &[1, 2, 1, 4]);
    let k = Tensor::zeros(DType::F32, &[1, 2, 8, 4]);
    let err = sdpa_prefix(
        &q,
        &k,
        &k,
        9,
        None,
        &SdpaOptions::default(),
        &KernelOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("9 keys in use") && err.contains("8 rows a head"),
        "{err}"
    );
    // A mask must be over the keys in use, not the capacity.
    let mask = Tensor::zeros(DType::Bool, &[1, 1, 1, 8]);
    let err = sdpa_prefix(
        &q,
        &k,
        &k,
        5,
        Some(&mask),
        &SdpaOptions::default(),
        &KernelOptions::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("broadcast"), "{err}");
}

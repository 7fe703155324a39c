//! The fused SDPA kernel against the unfused reference `cpu::sdpa_reference`, over a grid
//! of dtypes, lengths, head dims, masks, causal and grouped heads, plus fully masked
//! rows, edge sizes and errors.

use graphrw_kernels::cpu::{Broadcast, CpuFeatures, Isa};
use graphrw_kernels::fused::sdpa::{sdpa_tuned, selected_kernel_with, SdpaKernel};
use graphrw_kernels::fused::{sdpa, FullyMaskedRows, SdpaOptions};
use graphrw_kernels::testing::compare;
use graphrw_kernels::{cpu, DType, KernelError, KernelOptions, SdpaBlocks, SdpaTuning, Tensor};

/// The kernel options that run the SDPA paths this CPU has, each once: the default
/// (the best kernel), the packed path capped at AVX2, the operands read in place (with
/// and without the AVX2 micro-tiles), the packed path's softmax step as a pass of its
/// own, the packed paths with [`ODD_BLOCKS`], the AVX-512 packed kernels broadcasting
/// into a register ([`in_register`]; with the tuned and the odd blocks), bf16 on the
/// AVX-512 f32 FMAs instead of its dot products, and the portable loops; the default once more with the decode path off (the default takes
/// it for a few query rows over many keys: see `tests/sdpa_decode.rs`).
fn variants() -> Vec<KernelOptions> {
    let base = KernelOptions::default();
    let tuned = |t: SdpaTuning| base.with_sdpa(t);
    let all = [
        base,
        tuned(SdpaTuning::default().with_decode(false)),
        tuned(SdpaTuning::default().with_max_isa(Isa::Avx2Fma)),
        tuned(SdpaTuning::default().with_pack(false)),
        tuned(
            SdpaTuning::default()
                .with_pack(false)
                .with_micro_kernels(false),
        ),
        tuned(SdpaTuning::default().with_fuse_softmax(false)),
        // Blocks that are not multiples of the key panels or of each other: a causal
        // key block is cut where the diagonal starts, off the tuned sizes' grid.
        tuned(SdpaTuning::default().with_blocks(ODD_BLOCKS)),
        tuned(
            SdpaTuning::default()
                .with_max_isa(Isa::Avx2Fma)
                .with_blocks(ODD_BLOCKS),
        ),
        in_register(),
        tuned(in_register().sdpa.with_blocks(ODD_BLOCKS)),
        // bf16 converted to f32 for the AVX-512 FMAs, not on BF16 dot products.
        tuned(pinned(Broadcast::InFma).sdpa.with_bf16_dot_products(false)),
        base.with_max_isa(Isa::Baseline),
    ];
    let mut seen = Vec::new();
    all.into_iter()
        .filter(|o| {
            // Options that run the same kernel the same way are one variant.
            let key = (
                selected_kernel_with(DType::F32, o),
                selected_kernel_with(DType::BF16, o),
                o.sdpa.fuse_softmax,
                o.sdpa.micro_kernels,
                o.sdpa.blocks.map(|b| (b.q, b.k)),
                o.sdpa.decode,
            );
            let new = !seen.contains(&key);
            seen.push(key);
            new
        })
        .collect()
}

/// The options pinning the AVX-512 packed kernels' depth loops to broadcast into a
/// register ([`Broadcast::InRegister`]; the chooser off, which would time both forms).
fn in_register() -> KernelOptions {
    pinned(Broadcast::InRegister)
}

/// The options pinning the broadcast form `b` (the chooser and the decode path off).
fn pinned(b: Broadcast) -> KernelOptions {
    KernelOptions::default().with_sdpa(
        SdpaTuning::default()
            .with_choose(false)
            .with_decode(false)
            .with_broadcast(b),
    )
}

/// Query and key blocks off the tuned sizes' grid (see [`variants`]).
const ODD_BLOCKS: SdpaBlocks = SdpaBlocks { q: 20, k: 44 };

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

    fn bools(&mut self, shape: &[usize], p_true: f64, keep_col0: bool) -> Tensor {
        let n: usize = shape.iter().product();
        let last = *shape.last().unwrap();
        let vals: Vec<bool> = (0..n)
            .map(|i| (keep_col0 && i % last == 0) || self.uniform(0.0, 1.0) < p_true)
            .collect();
        Tensor::from_vec(shape.to_vec(), vals).unwrap()
    }
}

/// `(atol, rtol)`: absolute error relative to the output's largest magnitude, and
/// relative error per element.
fn tolerance(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F32 => (1e-5, 1e-4),
        DType::F64 => (1e-12, 1e-10),
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
    compare::assert_close(&got.to_f64_vec(), &w, tol, what);
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
    /// Bool `[B, 1, 1, Skv]` (key padding).
    Padding,
    /// Bool `[Sq, Skv]`.
    Square,
    /// Additive float `[B, Hq, Sq, Skv]`.
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
    dv: usize,
    mask: MaskKind,
    causal: bool,
    scale: Option<f64>,
}

/// The inputs of case `c` from `seed`: `q`, `k`, `v` and the mask.
fn inputs(c: Case, seed: u64) -> (Tensor, Tensor, Tensor, Option<Tensor>) {
    let mut rng = Rng(seed);
    let q = rng.tensor(c.dtype, &[c.b, c.hq, c.sq, c.d], -2.0, 2.0);
    let k = rng.tensor(c.dtype, &[c.b, c.hkv, c.skv, c.d], -2.0, 2.0);
    let v = rng.tensor(c.dtype, &[c.b, c.hkv, c.skv, c.dv], -1.0, 1.0);
    // Masks keep key 0 visible, so no row is fully masked here.
    let mask = match c.mask {
        MaskKind::None => None,
        MaskKind::Padding => Some(rng.bools(&[c.b, 1, 1, c.skv], 0.7, true)),
        MaskKind::Square => Some(rng.bools(&[c.sq, c.skv], 0.5, true)),
        MaskKind::Additive => {
            let shape = [c.b, c.hq, c.sq, c.skv];
            let n: usize = shape.iter().product();
            let vals: Vec<f64> = (0..n)
                .map(|_| match rng.next() % 8 {
                    0 => -1e9,
                    1 => f64::NEG_INFINITY,
                    _ => rng.uniform(-3.0, 1.0),
                })
                .enumerate()
                .map(|(i, x)| if i % c.skv == 0 { 0.5 } else { x })
                .collect();
            Some(Tensor::from_f64_slice(c.dtype, &shape, &vals).unwrap())
        }
    };
    (q, k, v, mask)
}

/// Runs one case against the reference; returns nothing, panics on mismatch.
fn check(c: Case, seed: u64) {
    let (q, k, v, mask) = inputs(c, seed);
    let gqa = c.hq != c.hkv;
    let want = cpu::sdpa_reference(&q, &k, &v, mask.as_ref(), c.causal, c.scale, gqa).unwrap();
    let opts = SdpaOptions {
        is_causal: c.causal,
        scale: c.scale,
        enable_gqa: gqa,
        fully_masked_rows: FullyMaskedRows::Nan,
    };
    for kernel in variants() {
        let got = sdpa_tuned(&q, &k, &v, mask.as_ref(), &opts, &kernel).unwrap();
        let what = format!("{c:?} on {:?}", selected_kernel_with(c.dtype, &kernel));
        assert_close(&got, &want, &what);
    }
}

#[test]
fn grid_against_reference() {
    let seqs = [
        (1, 1),
        (1, 7),
        (7, 7),
        (7, 128),
        (128, 7),
        (128, 128),
        (33, 300),
    ];
    let dims = [16, 64, 80, 128];
    let heads = [(2, 2), (4, 2), (4, 1)];
    let variants = [
        (MaskKind::None, false),
        (MaskKind::None, true),
        (MaskKind::Padding, false),
        (MaskKind::Square, false),
        (MaskKind::Additive, false),
    ];
    let mut n = 0u64;
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for &(sq, skv) in &seqs {
            for &d in &dims {
                for &(mask, causal) in &variants {
                    let (hq, hkv) = heads[(n % 3) as usize];
                    let big = sq * skv >= 128 * 128;
                    check(
                        Case {
                            dtype,
                            b: if big { 1 } else { 2 },
                            hq,
                            hkv,
                            sq,
                            skv,
                            d,
                            dv: d,
                            mask,
                            causal,
                            scale: None,
                        },
                        n,
                    );
                    n += 1;
                }
            }
        }
    }
}

#[test]
fn long_sequences() {
    let base = Case {
        dtype: DType::F32,
        b: 1,
        hq: 2,
        hkv: 1,
        sq: 1000,
        skv: 1000,
        d: 16,
        dv: 16,
        mask: MaskKind::None,
        causal: false,
        scale: None,
    };
    check(base, 1);
    check(
        Case {
            d: 64,
            dv: 64,
            causal: true,
            ..base
        },
        2,
    );
    check(
        Case {
            hq: 1,
            mask: MaskKind::Padding,
            ..base
        },
        3,
    );
    check(
        Case {
            dtype: DType::F16,
            hq: 1,
            sq: 128,
            d: 64,
            dv: 64,
            mask: MaskKind::Square,
            ..base
        },
        4,
    );
    check(
        Case {
            dtype: DType::BF16,
            hq: 1,
            sq: 1000,
            skv: 128,
            d: 64,
            dv: 64,
            causal: true,
            ..base
        },
        5,
    );
}

#[test]
fn odd_sizes_scale_and_f64() {
    let base = Case {
        dtype: DType::F32,
        b: 1,
        hq: 1,
        hkv: 1,
        sq: 1,
        skv: 1,
        d: 1,
        dv: 1,
        mask: MaskKind::None,
        causal: false,
        scale: None,
    };
    check(base, 10);
    // Head dims that are not multiples of the micro-tiles, and D != Dv.
    for (i, (d, dv)) in [(1, 3), (3, 20), (5, 7), (64, 24), (80, 128), (128, 17)]
        .into_iter()
        .enumerate()
    {
        for mask in [MaskKind::None, MaskKind::Square] {
            check(
                Case {
                    b: 2,
                    hq: 2,
                    hkv: 2,
                    sq: 19,
                    skv: 70,
                    d,
                    dv,
                    mask,
                    causal: mask == MaskKind::None,
                    scale: Some(0.3 + i as f64 * 0.1),
                    ..base
                },
                11 + i as u64,
            );
        }
    }
    // f64 is computed in f64.
    for (i, mask) in [MaskKind::None, MaskKind::Padding, MaskKind::Additive]
        .into_iter()
        .enumerate()
    {
        check(
            Case {
                dtype: DType::F64,
                b: 2,
                hq: 4,
                hkv: 2,
                sq: 40,
                skv: 150,
                d: 24,
                dv: 24,
                mask,
                causal: i == 0,
                ..base
            },
            20 + i as u64,
        );
    }
}

/// Sizes around the register tiles of the AVX2 path (6 rows x 16 columns of the score
/// and value tiles, 8-column and scalar value tails), of the AVX-512 path (8-key panels,
/// key pairs and odd depths for bf16, 16-column panels in strips of up to 48) and
/// around the key/query blocks.
#[test]
fn micro_tile_boundaries() {
    let base = Case {
        dtype: DType::F32,
        b: 1,
        hq: 2,
        hkv: 1,
        sq: 1,
        skv: 1,
        d: 16,
        dv: 16,
        mask: MaskKind::None,
        causal: false,
        scale: None,
    };
    let mut seed = 900;
    for (sq, skv) in [
        (5, 6),
        (6, 5),
        (12, 11),
        (16, 13),
        (17, 127),
        (63, 129),
        (65, 134),
        (97, 257),
        // Around the AVX-512 path's 8-key panels and 16/48-column strips.
        (8, 9),
        (15, 7),
        (16, 17),
        (33, 49),
        // Around 48 rows and 96 keys (earlier blocks, and half the query block).
        (47, 95),
        (48, 96),
        (49, 97),
        // Around the 96-row query and 96-key blocks.
        (95, 95),
        (96, 193),
        (97, 96),
        (193, 97),
    ] {
        for (d, dv) in [
            (16, 8),
            (8, 16),
            (24, 40),
            (32, 9),
            (48, 31),
            (3, 49),
            (33, 64),
        ] {
            for (dtype, mask, causal) in [
                (DType::F32, MaskKind::None, true),
                (DType::F32, MaskKind::Square, false),
                (DType::F16, MaskKind::Padding, false),
                (DType::BF16, MaskKind::Additive, false),
                (DType::BF16, MaskKind::None, true),
                (DType::BF16, MaskKind::Square, false),
            ] {
                check(
                    Case {
                        dtype,
                        sq,
                        skv,
                        d,
                        dv,
                        mask,
                        causal,
                        ..base
                    },
                    seed,
                );
                seed += 1;
            }
        }
    }
}

#[test]
fn rank_two_and_several_batch_dims() {
    let mut rng = Rng(30);
    // Rank 2: one implicit head.
    let q = rng.tensor(DType::F32, &[9, 16], -1.0, 1.0);
    let k = rng.tensor(DType::F32, &[13, 16], -1.0, 1.0);
    let v = rng.tensor(DType::F32, &[13, 5], -1.0, 1.0);
    let want = cpu::sdpa_reference(&q, &k, &v, None, true, None, false).unwrap();
    let opts = SdpaOptions {
        is_causal: true,
        ..Default::default()
    };
    assert_close(&sdpa(&q, &k, &v, None, &opts).unwrap(), &want, "rank 2");
    // Rank 5 with a mask broadcast over the middle dims.
    let q = rng.tensor(DType::BF16, &[2, 3, 4, 11, 32], -1.0, 1.0);
    let k = rng.tensor(DType::BF16, &[2, 3, 2, 20, 32], -1.0, 1.0);
    let v = rng.tensor(DType::BF16, &[2, 3, 2, 20, 32], -1.0, 1.0);
    let mask = rng.bools(&[2, 1, 1, 11, 20], 0.6, true);
    let want = cpu::sdpa_reference(&q, &k, &v, Some(&mask), false, None, true).unwrap();
    let opts = SdpaOptions {
        enable_gqa: true,
        ..Default::default()
    };
    assert_close(
        &sdpa(&q, &k, &v, Some(&mask), &opts).unwrap(),
        &want,
        "rank 5",
    );
}

#[test]
fn fully_masked_rows() {
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let mut rng = Rng(40);
        let (b, h, sq, skv, d) = (2, 2, 70, 150, 32);
        let q = rng.tensor(dtype, &[b, h, sq, d], -1.0, 1.0);
        let k = rng.tensor(dtype, &[b, h, skv, d], -1.0, 1.0);
        let v = rng.tensor(dtype, &[b, h, skv, d], -1.0, 1.0);
        // Rows 3 and 65 see nothing; row 10 only the last key (in the second block).
        let mut m = Vec::with_capacity(sq * skv);
        for i in 0..sq {
            for j in 0..skv {
                m.push(match i {
                    3 | 65 => false,
                    10 => j == skv - 1,
                    _ => (i + j) % 3 != 0,
                });
            }
        }
        let bool_mask = Tensor::from_vec(vec![sq, skv], m.clone()).unwrap();
        // The same as an additive mask with -inf.
        let add: Vec<f64> = m
            .iter()
            .map(|&keep| if keep { 0.0 } else { f64::NEG_INFINITY })
            .collect();
        let add_mask = Tensor::from_f64_slice(dtype, &[sq, skv], &add).unwrap();
        // A key-padding mask hiding every key of batch 1.
        let mut pad = vec![true; skv];
        pad.extend(vec![false; skv]);
        let pad_mask = Tensor::from_vec(vec![b, 1, 1, skv], pad).unwrap();
        for mask in [&bool_mask, &add_mask, &pad_mask] {
            let want = cpu::sdpa_reference(&q, &k, &v, Some(mask), false, None, false).unwrap();
            assert!(want.to_f64_vec().iter().any(|x| x.is_nan()));
            let nan = SdpaOptions {
                fully_masked_rows: FullyMaskedRows::Nan,
                ..Default::default()
            };
            let got = sdpa(&q, &k, &v, Some(mask), &nan).unwrap();
            assert_close(&got, &want, "Nan rows");
            let zero = SdpaOptions {
                fully_masked_rows: FullyMaskedRows::Zero,
                ..Default::default()
            };
            let got = sdpa(&q, &k, &v, Some(mask), &zero).unwrap();
            assert_close(&got, &nan_to_zero(&want), "Zero rows");
        }
        // Large finite negatives do not mask a row fully: a real softmax over them.
        let fin: Vec<f64> = m
            .iter()
            .map(|&keep| if keep { 0.0 } else { -1e4 })
            .collect();
        let fin_mask = Tensor::from_f64_slice(dtype, &[sq, skv], &fin).unwrap();
        let want = cpu::sdpa_reference(&q, &k, &v, Some(&fin_mask), false, None, false).unwrap();
        assert!(!want.to_f64_vec().iter().any(|x| x.is_nan()));
        let zero = SdpaOptions {
            fully_masked_rows: FullyMaskedRows::Zero,
            ..Default::default()
        };
        let got = sdpa(&q, &k, &v, Some(&fin_mask), &zero).unwrap();
        assert_close(&got, &want, "finite mask");
    }
}

#[test]
fn causal_with_mask_and_long_queries() {
    let mut rng = Rng(50);
    let (sq, skv, d) = (150, 90, 16);
    let q = rng.tensor(DType::F32, &[1, 2, sq, d], -1.0, 1.0);
    let k = rng.tensor(DType::F32, &[1, 2, skv, d], -1.0, 1.0);
    let v = rng.tensor(DType::F32, &[1, 2, skv, d], -1.0, 1.0);
    let pad = rng.bools(&[1, 1, 1, skv], 0.6, true);
    // Causal and a mask together equal the combined bool mask.
    let pad_vals = pad.as_slice::<bool>().unwrap().to_vec();
    let combined: Vec<bool> = (0..sq * skv)
        .map(|x| {
            let (i, j) = (x / skv, x % skv);
            j <= i && pad_vals[j]
        })
        .collect();
    let combined = Tensor::from_vec(vec![sq, skv], combined).unwrap();
    let want = cpu::sdpa_reference(&q, &k, &v, Some(&combined), false, None, false).unwrap();
    let opts = SdpaOptions {
        is_causal: true,
        ..Default::default()
    };
    let got = sdpa(&q, &k, &v, Some(&pad), &opts).unwrap();
    assert_close(&got, &want, "causal + padding");
}

#[test]
fn empty_sizes() {
    let z = |shape: &[usize]| Tensor::zeros(DType::F32, shape);
    // No keys: the product with an empty v, zeros.
    let out = sdpa(
        &z(&[1, 2, 3, 4]),
        &z(&[1, 2, 0, 4]),
        &z(&[1, 2, 0, 5]),
        None,
        &SdpaOptions::default(),
    )
    .unwrap();
    assert_eq!(out.shape(), &[1, 2, 3, 5]);
    assert!(out.as_slice::<f32>().unwrap().iter().all(|&x| x == 0.0));
    // No queries, no heads, no value columns.
    for (q, k, v, out_shape) in [
        (
            vec![1, 2, 0, 4],
            vec![1, 2, 3, 4],
            vec![1, 2, 3, 5],
            vec![1, 2, 0, 5],
        ),
        (
            vec![0, 2, 3, 4],
            vec![0, 2, 3, 4],
            vec![0, 2, 3, 5],
            vec![0, 2, 3, 5],
        ),
        (
            vec![1, 2, 3, 4],
            vec![1, 2, 3, 4],
            vec![1, 2, 3, 0],
            vec![1, 2, 3, 0],
        ),
    ] {
        let out = sdpa(&z(&q), &z(&k), &z(&v), None, &SdpaOptions::default()).unwrap();
        assert_eq!(out.shape(), &out_shape[..]);
    }
    // D = 0: every score is 0, a uniform average of v.
    let v = Tensor::from_vec(vec![1, 1, 2, 1], vec![1.0f32, 3.0]).unwrap();
    let out = sdpa(
        &z(&[1, 1, 2, 0]),
        &z(&[1, 1, 2, 0]),
        &v,
        None,
        &SdpaOptions::default(),
    )
    .unwrap();
    assert_eq!(out.as_slice::<f32>().unwrap(), &[2.0, 2.0]);
}

#[test]
fn errors_name_the_shapes() {
    let t = |dt: DType, shape: &[usize]| Tensor::zeros(dt, shape);
    let f = DType::F32;
    let o = SdpaOptions::default();
    let msg = |r: Result<Tensor, KernelError>| r.unwrap_err().to_string();
    let e = msg(sdpa(
        &t(f, &[2, 3, 4]),
        &t(f, &[2, 5, 8]),
        &t(f, &[2, 5, 8]),
        None,
        &o,
    ));
    assert!(e.contains("[2, 3, 4]") && e.contains("[2, 5, 8]"), "{e}");
    let e = msg(sdpa(&t(f, &[4]), &t(f, &[4]), &t(f, &[4]), None, &o));
    assert!(e.contains("rank"), "{e}");
    let e = msg(sdpa(
        &t(f, &[1, 4, 3, 8]),
        &t(f, &[1, 2, 5, 8]),
        &t(f, &[1, 2, 5, 8]),
        None,
        &o,
    ));
    assert!(
        e.contains("enable_gqa") && e.contains("[1, 4, 3, 8]"),
        "{e}"
    );
    let gqa = SdpaOptions {
        enable_gqa: true,
        ..o
    };
    let e = msg(sdpa(
        &t(f, &[1, 3, 3, 8]),
        &t(f, &[1, 2, 5, 8]),
        &t(f, &[1, 2, 5, 8]),
        None,
        &gqa,
    ));
    assert!(e.contains("multiple"), "{e}");
    let (q, k) = (t(f, &[1, 2, 3, 8]), t(f, &[1, 2, 5, 8]));
    let e = msg(sdpa(&q, &k, &k, Some(&t(DType::Bool, &[4, 5])), &o));
    assert!(e.contains("[4, 5]") && e.contains("[1, 2, 3, 5]"), "{e}");
    assert!(matches!(
        sdpa(&q, &k, &k, Some(&t(DType::F16, &[3, 5])), &o),
        Err(KernelError::DTypeMismatch { .. })
    ));
    assert!(matches!(
        sdpa(&q, &t(DType::F16, &[1, 2, 5, 8]), &k, None, &o),
        Err(KernelError::DTypeMismatch { .. })
    ));
    let i = DType::I64;
    assert!(matches!(
        sdpa(
            &t(i, &[1, 2, 3, 8]),
            &t(i, &[1, 2, 5, 8]),
            &t(i, &[1, 2, 5, 8]),
            None,
            &o
        ),
        Err(KernelError::UnsupportedDType { .. })
    ));
}

/// [`sdpa`] runs the best kernel this CPU has unless the options say otherwise, so the
/// grids above, run on each of [`variants`], test every path: the AVX-512 packed path
/// (bf16 on its dot products) where the CPU has AVX-512 F/BW/BF16, the AVX2 packed path
/// where it has AVX2+FMA only or the SDPA cap is AVX2, the unpacked AVX2 path with
/// packing off (and for f64), and the portable loops without AVX2+FMA or at the
/// baseline cap.
#[test]
fn best_available_path_is_selected() {
    let f = CpuFeatures::get();
    let avx2 = f.avx2 && f.fma;
    let avx512 = avx2 && Isa::Avx512.is_available() && f.avx512bf16;
    let expected = |dtype: DType, o: &KernelOptions| {
        if !avx2 || o.sdpa_isa() == Isa::Baseline {
            SdpaKernel::Plain
        } else if !o.sdpa.pack || dtype == DType::F64 {
            SdpaKernel::Avx2
        } else if !avx512 || o.sdpa_isa() < Isa::Avx512 {
            SdpaKernel::PackedAvx2
        } else {
            let dot = dtype == DType::BF16 && o.sdpa.bf16_dot_products;
            match (dot, o.sdpa.broadcast) {
                (true, Broadcast::InFma) => SdpaKernel::PackedAvx512Bf16,
                (false, Broadcast::InFma) => SdpaKernel::PackedAvx512,
                (true, Broadcast::InRegister) => SdpaKernel::PackedAvx512Bf16InRegister,
                (false, Broadcast::InRegister) => SdpaKernel::PackedAvx512InRegister,
            }
        }
    };
    let base = KernelOptions::default();
    let options = [
        base,
        base.with_sdpa(SdpaTuning::default().with_max_isa(Isa::Avx2Fma)),
        base.with_sdpa(SdpaTuning::default().with_pack(false)),
        base.with_max_isa(Isa::Avx2Fma),
        base.with_max_isa(Isa::Baseline),
        base.with_sdpa(SdpaTuning::default().with_max_isa(Isa::Baseline)),
        in_register(),
        in_register().with_max_isa(Isa::Avx2Fma),
        in_register().with_max_isa(Isa::Baseline),
        base.with_sdpa(SdpaTuning::default().with_bf16_dot_products(false)),
        in_register().with_sdpa(in_register().sdpa.with_bf16_dot_products(false)),
    ];
    for o in &options {
        for dtype in [DType::BF16, DType::F32, DType::F16, DType::F64] {
            assert_eq!(
                selected_kernel_with(dtype, o),
                expected(dtype, o),
                "{dtype:?} {o:?}"
            );
        }
    }
    assert_eq!(
        graphrw_kernels::fused::sdpa::selected_kernel(DType::F32),
        expected(DType::F32, &base)
    );
    if !avx512 {
        println!(
            "SKIPPED: the AVX-512 SDPA kernels need AVX-512 F, BW and BF16 (the grids ran {:?})",
            variants()
                .iter()
                .map(|o| selected_kernel_with(DType::F32, o))
                .collect::<Vec<_>>()
        );
    }
}

/// The AVX-512 packed kernels' two broadcast forms ([`Broadcast`]) run the same
/// operations on each sum in the same order, so they give the same bits; both against
/// the reference too: lengths 1 to 300 around the 8-key panels, the 16-column panels,
/// the 48-column strips and the 96-key blocks (query and key counts apart or equal),
/// head sizes 32, 64, 80, 128 and 256, f32, bf16 and f16, causal, every mask kind,
/// grouped heads.
#[test]
fn broadcast_forms_give_the_same_bits() {
    let (fma, reg) = (pinned(Broadcast::InFma), in_register());
    let f = CpuFeatures::get();
    if !(f.avx2 && f.fma && Isa::Avx512.is_available() && f.avx512bf16) {
        println!("SKIPPED: the AVX-512 SDPA kernels need AVX-512 F, BW and BF16");
        return;
    }
    assert_eq!(
        selected_kernel_with(DType::F32, &reg),
        SdpaKernel::PackedAvx512InRegister
    );
    assert_eq!(
        selected_kernel_with(DType::BF16, &reg),
        SdpaKernel::PackedAvx512Bf16InRegister
    );
    let masks = [
        MaskKind::None,
        MaskKind::Padding,
        MaskKind::Square,
        MaskKind::Additive,
    ];
    let mut seed = 7000;
    for (sq, skv) in [
        (1, 1),
        (1, 300),
        (7, 9),
        (8, 8),
        (16, 17),
        (17, 31),
        (33, 47),
        (48, 48),
        (49, 95),
        (96, 96),
        (97, 130),
        (150, 150),
        (200, 97),
        (255, 255),
        (300, 300),
    ] {
        for d in [32, 64, 80, 128, 256] {
            for dtype in [DType::F32, DType::BF16, DType::F16] {
                seed += 1;
                let (hq, hkv) = if seed % 2 == 0 { (4, 2) } else { (2, 2) };
                let c = Case {
                    dtype,
                    b: 1,
                    hq,
                    hkv,
                    sq,
                    skv,
                    d,
                    dv: if seed % 3 == 0 { 48 } else { d },
                    // Causal or one mask (the reference takes one or the other).
                    mask: masks
                        .get((seed % 6) as usize)
                        .copied()
                        .unwrap_or(MaskKind::None),
                    causal: seed % 6 >= 4,
                    scale: None,
                };
                let (q, k, v, mask) = inputs(c, seed);
                let gqa = hq != hkv;
                let opts = SdpaOptions {
                    is_causal: c.causal,
                    enable_gqa: gqa,
                    ..SdpaOptions::default()
                };
                let a = sdpa_tuned(&q, &k, &v, mask.as_ref(), &opts, &fma).unwrap();
                let b = sdpa_tuned(&q, &k, &v, mask.as_ref(), &opts, &reg).unwrap();
                let what = format!("{c:?}");
                let (x, y) = (a.to_f64_vec(), b.to_f64_vec());
                for (i, (x, y)) in x.iter().zip(&y).enumerate() {
                    assert!(
                        x.to_bits() == y.to_bits(),
                        "{what}: element {i}: in register {y}, in the FMAs {x}"
                    );
                }
                let want =
                    cpu::sdpa_reference(&q, &k, &v, mask.as_ref(), c.causal, None, gqa).unwrap();
                assert_close(&b, &want, &what);
            }
        }
    }
}

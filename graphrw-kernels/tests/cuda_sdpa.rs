//! CUDA tests (feature `cuda`). Without a GPU every device test prints
//! `skipped: no CUDA device` and returns; the NVRTC compile test runs wherever the NVRTC
//! library can be found (`GRAPHRW_NVRTC_LIB`, or the `nvidia-cuda-nvrtc` wheel of the
//! `python3` on the PATH) and says `skipped` otherwise.
#![cfg(feature = "cuda")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use graphrw_kernels::cpu::sdpa_reference;
use graphrw_kernels::cuda::{self, CudaDevice, SdpaOptions};
use graphrw_kernels::{DType, KernelError, Tensor};

static SKIPPED: AtomicUsize = AtomicUsize::new(0);

fn skip(test: &str, why: &str) {
    let n = SKIPPED.fetch_add(1, Ordering::SeqCst) + 1;
    eprintln!("skipped: no CUDA device: {test}: {why} ({n} skipped in this binary so far)");
}

fn gpu(test: &str) -> Option<Arc<CudaDevice>> {
    match CudaDevice::get(0) {
        Ok(d) => {
            eprintln!("{test}: running on {d:?}");
            Some(d)
        }
        Err(e) => {
            skip(test, &e.to_string());
            None
        }
    }
}

/// Names the NVRTC library to the CUDA runtime: the test harness's `GRAPHRW_NVRTC_LIB`,
/// else the NVRTC of the `nvidia-cuda-nvrtc` wheel when it is installed for `python3`.
fn find_wheel_nvrtc() {
    if let Some(path) = std::env::var_os("GRAPHRW_NVRTC_LIB") {
        graphrw_kernels::cuda::set_nvrtc_library(path);
        return;
    }
    let script = "import glob, os, sys\n\
                  for p in sys.path:\n\
                  \x20   for f in sorted(glob.glob(os.path.join(p, 'nvidia', '*', 'lib', 'libnvrtc.so.*'))):\n\
                  \x20       print(f); raise SystemExit\n";
    let Ok(out) = std::process::Command::new("python3")
        .args(["-c", script])
        .output()
    else {
        return;
    };
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !path.is_empty() {
        graphrw_kernels::cuda::set_nvrtc_library(path);
    }
}

/// A deterministic pseudo-random tensor with values in [-amp, amp).
fn rand_tensor(dtype: DType, shape: &[usize], seed: u64, amp: f64) -> Tensor {
    let n: usize = shape.iter().product();
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let data: Vec<f64> = (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * amp
        })
        .collect();
    Tensor::from_f64_slice(dtype, shape, &data).unwrap()
}

/// Largest |a - b| (NaN must match NaN).
fn max_err(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.shape(), b.shape());
    a.to_f64_vec()
        .iter()
        .zip(b.to_f64_vec())
        .map(|(x, y)| {
            if x.is_nan() || y.is_nan() {
                if x.is_nan() && y.is_nan() {
                    0.0
                } else {
                    f64::INFINITY
                }
            } else {
                (x - y).abs()
            }
        })
        .fold(0.0, f64::max)
}

fn tol(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 2e-5,
        DType::F16 => 4e-3,
        _ => 2.5e-2,
    }
}

struct Case {
    dtype: DType,
    b: usize,
    hq: usize,
    hkv: usize,
    sq: usize,
    skv: usize,
    d: usize,
    dv: usize,
    causal: bool,
    /// 0 none, 1 bool [Sq, Skv] broadcast, 2 additive f32 [B, 1, 1, Skv], 3 additive in
    /// q's dtype, full shape.
    mask: u8,
}

fn run_case(dev: &Arc<CudaDevice>, c: &Case, seed: u64) -> Result<f64, KernelError> {
    let q = rand_tensor(c.dtype, &[c.b, c.hq, c.sq, c.d], seed, 1.0);
    let k = rand_tensor(c.dtype, &[c.b, c.hkv, c.skv, c.d], seed + 1, 1.0);
    let v = rand_tensor(c.dtype, &[c.b, c.hkv, c.skv, c.dv], seed + 2, 1.0);
    let mask = match c.mask {
        0 => None,
        1 => {
            let data: Vec<bool> = (0..c.sq * c.skv)
                .map(|i| !(i * 7 + i / c.skv).is_multiple_of(5))
                .collect();
            Some(Tensor::from_vec(vec![c.sq, c.skv], data)?)
        }
        2 => Some(rand_tensor(DType::F32, &[c.b, 1, 1, c.skv], seed + 3, 3.0)),
        _ => Some(rand_tensor(
            c.dtype,
            &[c.b, c.hq, c.sq, c.skv],
            seed + 3,
            2.0,
        )),
    };
    let gqa = c.hq != c.hkv;
    let expected = sdpa_reference(&q, &k, &v, mask.as_ref(), c.causal, None, gqa)?;
    let dq = dev.upload(&q)?;
    let dk = dev.upload(&k)?;
    let dvv = dev.upload(&v)?;
    let dm = mask.as_ref().map(|m| dev.upload(m)).transpose()?;
    let opts = SdpaOptions {
        is_causal: c.causal,
        scale: None,
        enable_gqa: gqa,
    };
    let got = cuda::sdpa(&dq, &dk, &dvv, dm.as_ref(), &opts)?.to_host()?;
    assert_eq!(got.dtype(), c.dtype);
    Ok(max_err(&got, &expected))
}

#[allow(clippy::too_many_arguments)]
fn case(
    dtype: DType,
    b: usize,
    hq: usize,
    hkv: usize,
    sq: usize,
    skv: usize,
    d: usize,
    dv: usize,
    causal: bool,
    mask: u8,
) -> Case {
    Case {
        dtype,
        b,
        hq,
        hkv,
        sq,
        skv,
        d,
        dv,
        causal,
        mask,
    }
}

#[test]
fn nvrtc_compiles_every_kernel() {
    find_wheel_nvrtc();
    if !cuda::nvrtc_available() {
        let n = SKIPPED.fetch_add(1, Ordering::SeqCst) + 1;
        eprintln!(
            "skipped: no NVRTC library (install the nvidia-cuda-nvrtc wheel or set \
             GRAPHRW_NVRTC_LIB) ({n} skipped in this binary so far)"
        );
        return;
    }
    let mut compiled = 0;
    for (name, src, define_sets) in cuda::kernels::SOURCES {
        for defines in *define_sets {
            for arch in ["compute_80", "compute_90"] {
                let ptx = cuda::compile_ptx(src, name, defines, arch)
                    .unwrap_or_else(|e| panic!("{name} {defines:?} {arch}: {e}"));
                assert!(ptx.contains(".entry"), "{name}: no kernel entry in the PTX");
                compiled += 1;
            }
        }
    }
    eprintln!("nvrtc: compiled {compiled} kernel variants to PTX");
}

#[test]
fn no_device_is_an_error_not_a_panic() {
    // Whatever the machine, asking for a device far past the last one is an error.
    let err = CudaDevice::get(4096).unwrap_err();
    assert!(err.to_string().contains("cuda"), "{err}");
}

#[test]
fn gpu_sdpa_matches_reference() {
    let Some(dev) = gpu("gpu_sdpa_matches_reference") else {
        return;
    };
    use DType::*;
    let cases = [
        case(F16, 2, 4, 4, 128, 128, 64, 64, false, 0),
        case(F16, 2, 4, 4, 200, 200, 64, 64, true, 0),
        case(BF16, 2, 4, 4, 130, 77, 128, 128, false, 0),
        case(BF16, 1, 8, 2, 257, 257, 128, 128, true, 0),
        case(F16, 1, 4, 4, 64, 300, 128, 128, true, 0),
        case(F16, 2, 2, 2, 100, 90, 64, 64, false, 1),
        case(BF16, 2, 2, 2, 96, 140, 64, 64, false, 2),
        case(F16, 1, 2, 1, 70, 50, 64, 64, false, 3),
        case(F16, 1, 2, 2, 80, 80, 256, 256, true, 0),
        case(BF16, 1, 2, 2, 33, 65, 96, 80, false, 0),
        case(F16, 1, 3, 3, 45, 61, 40, 40, true, 0),
        case(F32, 2, 4, 4, 100, 100, 64, 64, false, 0),
        case(F32, 1, 4, 2, 129, 129, 128, 128, true, 0),
        case(F32, 1, 2, 2, 40, 70, 256, 32, false, 1),
        case(F32, 1, 2, 2, 33, 33, 48, 48, false, 2),
        case(F16, 1, 1, 1, 1, 1, 64, 64, false, 0),
    ];
    let mut failures = vec![];
    for (i, c) in cases.iter().enumerate() {
        let err = run_case(&dev, c, 100 + i as u64).unwrap();
        let ok = err <= tol(c.dtype);
        eprintln!(
            "case {i}: {} B={} Hq={} Hkv={} Sq={} Skv={} D={} Dv={} causal={} mask={} max|err|={err:.3e} {}",
            c.dtype, c.b, c.hq, c.hkv, c.sq, c.skv, c.d, c.dv, c.causal, c.mask,
            if ok { "ok" } else { "FAIL" }
        );
        if !ok {
            failures.push(i);
        }
    }
    assert!(
        failures.is_empty(),
        "cases {failures:?} differ from the reference"
    );
}

#[test]
fn gpu_fully_masked_row_is_nan_like_reference() {
    let Some(dev) = gpu("gpu_fully_masked_row_is_nan_like_reference") else {
        return;
    };
    for dtype in [DType::F16, DType::F32] {
        let (sq, skv, d) = (4, 8, 64);
        let q = rand_tensor(dtype, &[1, 1, sq, d], 1, 1.0);
        let k = rand_tensor(dtype, &[1, 1, skv, d], 2, 1.0);
        let v = rand_tensor(dtype, &[1, 1, skv, d], 3, 1.0);
        // Row 2 masks every key.
        let mask: Vec<bool> = (0..sq * skv).map(|i| i / skv != 2).collect();
        let mask = Tensor::from_vec(vec![sq, skv], mask).unwrap();
        let expected = sdpa_reference(&q, &k, &v, Some(&mask), false, None, false).unwrap();
        let got = cuda::sdpa(
            &dev.upload(&q).unwrap(),
            &dev.upload(&k).unwrap(),
            &dev.upload(&v).unwrap(),
            Some(&dev.upload(&mask).unwrap()),
            &SdpaOptions::default(),
        )
        .unwrap()
        .to_host()
        .unwrap();
        let row2 = &got.to_f64_vec()[2 * d..3 * d];
        assert!(
            row2.iter().all(|x| x.is_nan()),
            "{dtype}: row 2 should be NaN"
        );
        assert!(max_err(&got, &expected) <= tol(dtype));
    }
}

#[test]
fn gpu_transfers_round_trip_every_dtype() {
    let Some(dev) = gpu("gpu_transfers_round_trip_every_dtype") else {
        return;
    };
    let tensors = [
        rand_tensor(DType::F32, &[3, 5], 1, 10.0),
        rand_tensor(DType::F16, &[7], 2, 10.0),
        rand_tensor(DType::BF16, &[2, 2, 2], 3, 10.0),
        Tensor::from_vec(vec![4], vec![1i64, -2, i64::MAX, i64::MIN]).unwrap(),
        Tensor::from_vec(vec![3], vec![true, false, true]).unwrap(),
        Tensor::zeros(DType::F32, &[0, 4]),
    ];
    for t in &tensors {
        let back = dev.upload(t).unwrap().to_host().unwrap();
        assert_eq!(back.dtype(), t.dtype());
        assert_eq!(back.shape(), t.shape());
        assert_eq!(back.to_raw_bytes(), t.to_raw_bytes());
    }
}

#[test]
fn gpu_sdpa_rejects_bad_input() {
    let Some(dev) = gpu("gpu_sdpa_rejects_bad_input") else {
        return;
    };
    let q = dev
        .upload(&rand_tensor(DType::F16, &[1, 4, 8, 64], 1, 1.0))
        .unwrap();
    let k = dev
        .upload(&rand_tensor(DType::F16, &[1, 2, 8, 64], 2, 1.0))
        .unwrap();
    let k32 = dev
        .upload(&rand_tensor(DType::F32, &[1, 4, 8, 64], 2, 1.0))
        .unwrap();
    let big = dev
        .upload(&rand_tensor(DType::F16, &[1, 1, 8, 320], 2, 1.0))
        .unwrap();
    let o = SdpaOptions::default();
    assert!(
        cuda::sdpa(&q, &k, &k, None, &o).is_err(),
        "gqa without enable_gqa"
    );
    assert!(
        cuda::sdpa(&q, &k32, &k32, None, &o).is_err(),
        "dtype mismatch"
    );
    assert!(
        cuda::sdpa(&big, &big, &big, None, &o).is_err(),
        "head dim 320"
    );
}

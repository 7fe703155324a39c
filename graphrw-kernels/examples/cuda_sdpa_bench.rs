//! Fused SDPA on the GPU: timings and dumps for comparing against PyTorch.
//!
//! ```text
//! cargo run --release --features cuda --example cuda_sdpa_bench -- bench OUT.csv [S...]
//! cargo run --release --features cuda --example cuda_sdpa_bench -- dump DIR
//! ```
//! `bench`: B=4, H=16, D in {64, 128}, f16/bf16, causal or not, S in {512..8192} (or the
//! S given); writes `dtype,d,causal,s,ms,tflops` rows (FLOPs = 4·B·H·S·S·D, halved when
//! causal). `dump`: a few cases' inputs and outputs as raw little-endian files plus
//! `cases.txt`, read by `tools/gpu/sdpa_torch.py compare`.

use std::io::Write;
use std::sync::Arc;

use graphrw_kernels::cuda::cudarc::driver::sys::CUevent_flags;
use graphrw_kernels::cuda::{self, CudaDevice, CudaTensor, SdpaOptions};
use graphrw_kernels::{DType, KernelError, Tensor};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn rand_bytes(dtype: DType, n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(6364136223846793005) | 1;
    let data: Vec<f64> = (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        })
        .collect();
    Tensor::from_f64_slice(dtype, &[n], &data)
        .unwrap()
        .to_raw_bytes()
}

fn upload(
    dev: &Arc<CudaDevice>,
    dtype: DType,
    bytes: &[u8],
    shape: &[usize],
) -> Result<CudaTensor, KernelError> {
    let n: usize = shape.iter().product::<usize>() * dtype.size_in_bytes();
    dev.upload(&Tensor::from_raw_bytes(dtype, shape, &bytes[..n])?)
}

fn time_ms(dev: &Arc<CudaDevice>, mut f: impl FnMut() -> Res<()>) -> Res<f64> {
    for _ in 0..3 {
        f()?;
    }
    dev.synchronize()?;
    let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
    // one probe to choose the iteration count (~200 ms)
    let s = dev.stream();
    let a = s.record_event(flags)?;
    f()?;
    let b = s.record_event(flags)?;
    b.synchronize()?;
    let one = a.elapsed_ms(&b)? as f64;
    let iters = ((200.0 / one.max(1e-3)) as usize).clamp(3, 50);
    let a = s.record_event(flags)?;
    for _ in 0..iters {
        f()?;
    }
    let b = s.record_event(flags)?;
    b.synchronize()?;
    Ok(a.elapsed_ms(&b)? as f64 / iters as f64)
}

fn bench(dev: &Arc<CudaDevice>, out: &str, seqs: &[usize]) -> Res<()> {
    let (b, h) = (4usize, 16usize);
    let smax = *seqs.iter().max().unwrap();
    let mut csv = std::fs::File::create(out)?;
    writeln!(csv, "dtype,d,causal,s,ms,tflops")?;
    for dtype in [DType::F16, DType::BF16] {
        for d in [64usize, 128] {
            let n = b * h * smax * d;
            let (qb, kb, vb) = (
                rand_bytes(dtype, n, 1),
                rand_bytes(dtype, n, 2),
                rand_bytes(dtype, n, 3),
            );
            for &s in seqs {
                let shape = [b, h, s, d];
                let q = upload(dev, dtype, &qb, &shape)?;
                let k = upload(dev, dtype, &kb, &shape)?;
                let v = upload(dev, dtype, &vb, &shape)?;
                for causal in [false, true] {
                    let opts = SdpaOptions {
                        is_causal: causal,
                        ..Default::default()
                    };
                    let ms = time_ms(dev, || {
                        cuda::sdpa(&q, &k, &v, None, &opts)?;
                        Ok(())
                    })?;
                    let mut flops = 4.0 * (b * h * s * s * d) as f64;
                    if causal {
                        flops /= 2.0;
                    }
                    let tflops = flops / (ms * 1e-3) / 1e12;
                    println!(
                        "ours {dtype} D={d} causal={causal} S={s}: {ms:.3} ms {tflops:.1} TFLOP/s"
                    );
                    writeln!(csv, "{dtype},{d},{causal},{s},{ms:.4},{tflops:.2}")?;
                }
            }
        }
    }
    Ok(())
}

fn dump(dev: &Arc<CudaDevice>, dir: &str) -> Res<()> {
    std::fs::create_dir_all(dir)?;
    let mut meta = std::fs::File::create(format!("{dir}/cases.txt"))?;
    // name dtype b hq hkv sq skv d dv causal mask(none|bool|add)
    let cases: &[(&str, DType, [usize; 7], bool, &str)] = &[
        (
            "f16_d64",
            DType::F16,
            [2, 8, 8, 256, 256, 64, 64],
            false,
            "none",
        ),
        (
            "f16_d128_causal",
            DType::F16,
            [2, 8, 8, 300, 300, 128, 128],
            true,
            "none",
        ),
        (
            "bf16_d128",
            DType::BF16,
            [2, 8, 8, 512, 512, 128, 128],
            false,
            "none",
        ),
        (
            "bf16_d64_causal_gqa",
            DType::BF16,
            [1, 8, 2, 1024, 1024, 64, 64],
            true,
            "none",
        ),
        (
            "f16_d128_sq_ne_skv_bool",
            DType::F16,
            [2, 4, 4, 100, 333, 128, 128],
            false,
            "bool",
        ),
        (
            "bf16_d64_additive",
            DType::BF16,
            [2, 4, 4, 128, 128, 64, 64],
            false,
            "add",
        ),
        (
            "f16_d256_causal",
            DType::F16,
            [1, 4, 4, 200, 200, 256, 256],
            true,
            "none",
        ),
        (
            "f32_d64",
            DType::F32,
            [2, 4, 4, 128, 160, 64, 64],
            false,
            "none",
        ),
        (
            "f16_d80",
            DType::F16,
            [1, 4, 4, 100, 100, 80, 80],
            true,
            "none",
        ),
    ];
    for (i, &(name, dtype, [b, hq, hkv, sq, skv, d, dv], causal, mk)) in cases.iter().enumerate() {
        let seed = 10 * i as u64;
        let qs = [b, hq, sq, d];
        let ks = [b, hkv, skv, d];
        let vs = [b, hkv, skv, dv];
        let qb = rand_bytes(dtype, qs.iter().product(), seed);
        let kb = rand_bytes(dtype, ks.iter().product(), seed + 1);
        let vb = rand_bytes(dtype, vs.iter().product(), seed + 2);
        let mask = match mk {
            "bool" => Some(Tensor::from_vec(
                vec![b, 1, sq, skv],
                (0..b * sq * skv).map(|j| j % 7 != 3).collect::<Vec<bool>>(),
            )?),
            "add" => Some(Tensor::from_raw_bytes(
                dtype,
                &[1, 1, sq, skv],
                &rand_bytes(dtype, sq * skv, seed + 3),
            )?),
            _ => None,
        };
        let q = upload(dev, dtype, &qb, &qs)?;
        let k = upload(dev, dtype, &kb, &ks)?;
        let v = upload(dev, dtype, &vb, &vs)?;
        let m = mask.as_ref().map(|m| dev.upload(m)).transpose()?;
        let opts = SdpaOptions {
            is_causal: causal,
            scale: None,
            enable_gqa: hq != hkv,
        };
        let out = cuda::sdpa(&q, &k, &v, m.as_ref(), &opts)?.to_host()?;
        std::fs::write(format!("{dir}/{name}.q"), &qb)?;
        std::fs::write(format!("{dir}/{name}.k"), &kb)?;
        std::fs::write(format!("{dir}/{name}.v"), &vb)?;
        std::fs::write(format!("{dir}/{name}.out"), out.to_raw_bytes())?;
        if let Some(m) = &mask {
            std::fs::write(format!("{dir}/{name}.mask"), m.to_raw_bytes())?;
        }
        writeln!(
            meta,
            "{name} {dtype} {b} {hq} {hkv} {sq} {skv} {d} {dv} {} {mk}",
            causal as u8
        )?;
    }
    println!("dumped {} cases to {dir}", cases.len());
    Ok(())
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // This harness, like the command, maps its environment onto the kernel options
    // (`GRAPHRW_SDPA_CFG` for the launch) and the NVRTC library (`GRAPHRW_NVRTC_LIB`).
    let options = graphrw_kernels::options::vars::from_vars(|n| std::env::var(n).ok())?;
    let _options = options.install();
    let mut cuda_options = graphrw_kernels::cuda::CudaOptions::default();
    if let Some(lib) = std::env::var_os("GRAPHRW_NVRTC_LIB") {
        cuda_options = cuda_options.with_nvrtc_lib(lib);
    }
    let dev = CudaDevice::get_with(0, &cuda_options)?;
    eprintln!("device: {dev:?}");
    match args.first().map(String::as_str) {
        Some("bench") => {
            let out = args.get(1).map_or("ours.csv", String::as_str);
            let mut seqs: Vec<usize> = args[2.min(args.len())..]
                .iter()
                .filter_map(|s| s.parse().ok())
                .collect();
            if seqs.is_empty() {
                seqs = vec![512, 1024, 2048, 4096, 8192];
            }
            bench(&dev, out, &seqs)
        }
        Some("dump") => dump(&dev, args.get(1).map_or("sdpa_dump", String::as_str)),
        _ => Err("usage: cuda_sdpa_bench bench OUT.csv [S...] | dump DIR".into()),
    }
}

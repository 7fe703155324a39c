//! Times the CPU matmul on the shapes given and prints GFLOP/s, for
//! `benches/ort_matmul_compare.py` (which times onnxruntime's MatMul on the same
//! shapes in the same run).
//!
//! ```sh
//! RAYON_NUM_THREADS=1 cargo run --release -p graphrw-kernels --example gemm_rate -- \
//!     --cpu-time --repeat 5 512x768x768 512x768x3072 12:512x64x512
//! ```
//!
//! Each shape is `[BATCH:]MxKxN` (a batched product multiplies `BATCH` pairs of
//! matrices; without it `b` is one weight matrix). Prints one line per shape and
//! backend: `SHAPE BACKEND best_ms GFLOP/s` with `2 BATCH M K N` flops. A product
//! with one weight matrix (no `BATCH`) is also timed on the packed-weight GEMM with the
//! weight packed beforehand, once per kernel the CPU has (`packed-Avx2Fma`,
//! `packed-Avx512`, and `packed-Avx512-reg`, its form broadcasting into a register), through `matmul_epilogue_with` as the planner's epilogue runs it;
//! `--cold N` packs it N times and runs the copies in turn, so that with enough copies
//! the weight comes from memory each call, as in a model larger than the caches; `--act NAME`
//! (`relu`, `gelu`, `gelu_tanh`, `silu`) adds that activation to the packed products'
//! epilogue (the rate still counts the product's flops alone). `--peak`
//! first prints the probes (`cpu::probe`): the FMA rate at each vector width and the
//! best of them (the ceiling), and the memory read bandwidth, on one thread and on all.
//! The last line per shape, `SHAPE chosen MS GFLOP/s (KERNEL)`, is what a plan runs: the
//! kernel the chooser (`cpu::choice`) measures as fastest for the shape. `--cpu-time`
//! times by the CPU time of all the process's threads (Linux `CLOCK_PROCESS_CPUTIME_ID`), as
//! `sdpa_time` does.

use std::process::ExitCode;
use std::time::Instant;

use graphrw_kernels::cpu::choice;
use graphrw_kernels::cpu::probe::{self, VectorWidth};
use graphrw_kernels::cpu::Isa;
use graphrw_kernels::cpu::{
    matmul_epilogue_with, matmul_with, Activation, Broadcast, Epilogue, GemmBackend, PackedWeight,
};
use graphrw_kernels::Tensor;

#[path = "support/cpu_time.rs"]
mod cpu_time;
use cpu_time::process_cpu_seconds;

/// One product to time.
struct Spec {
    text: String,
    batch: Option<usize>,
    m: usize,
    k: usize,
    n: usize,
}

fn parse_spec(text: &str) -> Result<Spec, String> {
    let (batch, rest) = match text.split_once(':') {
        Some((b, r)) => (
            Some(b.parse::<usize>().map_err(|e| format!("`{text}`: {e}"))?),
            r,
        ),
        None => (None, text),
    };
    let dims: Vec<usize> = rest
        .split('x')
        .map(|s| {
            s.parse::<usize>()
                .map_err(|e| format!("`{text}`: `{s}`: {e}"))
        })
        .collect::<Result<_, _>>()?;
    let [m, k, n] = dims[..] else {
        return Err(format!("`{text}`: expected [BATCH:]MxKxN"));
    };
    Ok(Spec {
        text: text.to_string(),
        batch,
        m,
        k,
        n,
    })
}

/// Deterministic values in `[-1, 1)`.
fn ramp(shape: &[usize], seed: usize) -> Result<Tensor, String> {
    let n: usize = shape.iter().product();
    let vals: Vec<f32> = (0..n)
        .map(|i| (((i + seed * 7) * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    Tensor::from_vec(shape.to_vec(), vals).map_err(|e| e.to_string())
}

/// The value after option `name`: a count, at least 1.
fn count(name: &str, value: Option<String>) -> Result<usize, String> {
    let value = value.ok_or_else(|| format!("{name} needs a value"))?;
    let n = value
        .parse::<usize>()
        .map_err(|e| format!("{name} `{value}`: {e}"))?;
    Ok(n.max(1))
}

/// The activation named `name` (as `--act` takes it).
fn activation(name: Option<String>) -> Result<Activation, String> {
    match name.as_deref() {
        Some("identity") => Ok(Activation::Identity),
        Some("relu") => Ok(Activation::Relu),
        Some("gelu") => Ok(Activation::Gelu),
        Some("gelu_tanh") => Ok(Activation::GeluTanh),
        Some("silu") => Ok(Activation::Silu),
        other => Err(format!(
            "--act `{}`: expected identity, relu, gelu, gelu_tanh or silu",
            other.unwrap_or("")
        )),
    }
}

fn run() -> Result<(), String> {
    let mut repeat = 5usize;
    let mut act = Activation::Identity;
    let mut cpu_time = false;
    let mut copies = 1usize;
    let mut specs = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--cpu-time" => cpu_time = true,
            "--peak" => print_peaks(),
            "--cold" => copies = count(&a, args.next())?,
            "--act" => act = activation(args.next())?,
            "--repeat" => repeat = count(&a, args.next())?,
            _ => specs.push(parse_spec(&a)?),
        }
    }
    if specs.is_empty() {
        return Err("give at least one shape [BATCH:]MxKxN".into());
    }
    let backends = [
        ("auto", GemmBackend::Auto),
        ("gemm", GemmBackend::Gemm),
        ("matrixmultiply", GemmBackend::MatrixMultiply),
    ];
    for spec in specs {
        let (a_shape, b_shape) = match spec.batch {
            Some(b) => (vec![b, spec.m, spec.k], vec![b, spec.k, spec.n]),
            None => (vec![spec.m, spec.k], vec![spec.k, spec.n]),
        };
        let a = ramp(&a_shape, 0)?;
        let b = ramp(&b_shape, 1)?;
        let flops = 2.0 * (spec.batch.unwrap_or(1) * spec.m * spec.k * spec.n) as f64;
        let time = |f: &dyn Fn() -> Result<Tensor, String>| -> Result<f64, String> {
            f()?;
            let mut best = f64::INFINITY;
            for _ in 0..repeat {
                let t0 = Instant::now();
                let c0 = if cpu_time {
                    process_cpu_seconds()?
                } else {
                    0.0
                };
                let out = f()?;
                let secs = if cpu_time {
                    process_cpu_seconds()? - c0
                } else {
                    t0.elapsed().as_secs_f64()
                };
                best = best.min(secs);
                std::hint::black_box(out);
            }
            Ok(best)
        };
        let print = |name: &str, best: f64| {
            println!(
                "{} {name} {:.3} {:.1}",
                spec.text,
                best * 1e3,
                flops / best / 1e9
            );
        };
        for (name, backend) in backends {
            print(
                name,
                time(&|| matmul_with(&a, &b, backend).map_err(|e| e.to_string()))?,
            );
        }
        if spec.batch.is_some() {
            continue;
        }
        for (isa, broadcast) in [
            (Isa::Avx2Fma, Broadcast::InFma),
            (Isa::Avx512, Broadcast::InFma),
            (Isa::Avx512, Broadcast::InRegister),
        ] {
            let packed: Vec<PackedWeight> = (0..copies)
                .map_while(|_| PackedWeight::new_for(&b, None, isa))
                .collect();
            if packed.is_empty() {
                continue;
            }
            // Each call the next copy: with `--cold`, more bytes than the caches hold.
            let next = std::cell::Cell::new(0usize);
            let run = || {
                let w = &packed[next.get() % packed.len()];
                next.set(next.get() + 1);
                let epilogue = Epilogue {
                    packed: Some(w),
                    activation: act,
                    broadcast,
                    ..Epilogue::default()
                };
                matmul_epilogue_with(&a, &b, &epilogue, GemmBackend::Auto)
            };
            let form = match broadcast {
                Broadcast::InFma => "",
                Broadcast::InRegister => "-reg",
            };
            print(
                &format!("packed-{isa:?}{form}"),
                time(&|| run().map_err(|e| e.to_string()))?,
            );
        }
        // What a plan runs: the kernel the chooser measures for this shape (its
        // timing is the first call), then its packing, as the epilogue executor does.
        let options = graphrw_kernels::KernelOptions::current();
        let kernel = choice::global().kernel_for(&a, &b, None, &options);
        let packed = kernel
            .packed_isa()
            .and_then(|isa| PackedWeight::new_any_depth(&b, None, isa));
        let epilogue = Epilogue {
            packed: packed.as_ref(),
            activation: act,
            broadcast: kernel.broadcast(),
            ..Epilogue::default()
        };
        let best = time(&|| {
            matmul_epilogue_with(&a, &b, &epilogue, GemmBackend::Auto).map_err(|e| e.to_string())
        })?;
        println!(
            "{} chosen {:.3} {:.1} ({kernel})",
            spec.text,
            best * 1e3,
            flops / best / 1e9
        );
    }
    for isa in [Isa::Avx512, Isa::Avx2Fma] {
        if let Some(p) = graphrw_kernels::cpu::packed_prefetch::measured_so_far(isa) {
            println!(
                "prefetch {isa:?} {} ({:.2}x as fast with)",
                if p.on { "on" } else { "off" },
                p.speedup
            );
        }
    }
    Ok(())
}

/// The probes' rates on one thread and on all of rayon's: the FMA peak at each vector
/// width and the best of them, then the memory read bandwidth.
fn print_peaks() {
    let threads = rayon::current_num_threads();
    for t in [1, threads] {
        for width in [VectorWidth::Ymm, VectorWidth::Zmm] {
            if let Some(g) = probe::fma_peak_at(width, t, 20_000_000) {
                println!("fma_peak threads={t} width={width:?} {g:.1}");
            }
        }
        match probe::fma_peak_gflops(t, 20_000_000) {
            Some(g) => println!("fma_peak threads={t} {g:.1}"),
            None => println!("fma_peak threads={t} unavailable (no AVX2+FMA)"),
        }
    }
    let bytes = probe::default_bandwidth_bytes();
    for t in [1, threads] {
        match probe::memory_bandwidth_gbs(t, bytes) {
            Some(g) => println!("mem_bw threads={t} {:.0} MiB {g:.1} GB/s", bytes >> 20),
            None => println!("mem_bw threads={t} unavailable (no memory for the buffer)"),
        }
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gemm_rate: {e}");
            ExitCode::FAILURE
        }
    }
}

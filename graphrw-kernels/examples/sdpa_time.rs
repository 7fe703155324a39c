//! Times the fused CPU SDPA kernel on the shapes given, for `benches/torch_sdpa_compare.py`
//! (which times PyTorch's CPU `scaled_dot_product_attention` on the same shapes in the
//! same run, alternating with this program).
//!
//! ```sh
//! cargo run --release -p graphrw-kernels --example sdpa_time -- --repeat 5 f32,64,1024,causal bf16,128,2048
//! ```
//!
//! Each shape is `DTYPE,D,S[,causal]` with B = 1, H = 8 (`--heads N` changes it),
//! Sq = Skv = S. Prints one line per shape: `DTYPE,D,S,CAUSAL best_ms GFLOP/s`, where
//! the flops are `4 B H S S D` (halved when causal: the kernel skips the blocks above
//! the diagonal, as every peer does).
//!
//! `--choices` prints, after the times, to stderr, what the SDPA chooser kept for each
//! kind of shape (`graphrw_kernels::fused::sdpa::choice`): the kernel that won and each
//! candidate's time on its first call.
//!
//! `--cpu-time` times each call by the CPU time of all the process's threads (Linux:
//! `CLOCK_PROCESS_CPUTIME_ID`) instead of wall time: on a
//! machine shared with other jobs it does not count the time the threads waited for a
//! core. With one thread (`RAYON_NUM_THREADS=1`) it is the call's time on an idle core.
//!
//! The kernel options come from the `graphrw` command's `GRAPHRW_*` variables
//! (`graphrw_kernels::options::vars`), e.g. `GRAPHRW_SDPA_NO_AVX512=1` for the AVX2 path.
//!
//! `--decode` times decode steps instead: each shape is `DTYPE,HQ,HKV,D,SQ,SKV` (B = 1,
//! grouped heads), e.g.
//!
//! ```sh
//! RAYON_NUM_THREADS=1 cargo run --release -p graphrw-kernels --example sdpa_time -- \
//!     --decode --repeat 20 f32,32,4,64,1,1024 f32,32,4,64,16,4096
//! ```
//!
//! and prints, per shape, the best time in microseconds of the general kernel
//! (`SdpaTuning::decode` off) on the grouped K/V, of the same on K/V materialised to
//! `HQ` heads (what a graph that repeats the key/value heads runs), and of the decode
//! path, the three interleaved in each repetition; then the decode path's speed-up
//! over the first and the rate at which it reads K/V (bytes of K and V once, per
//! second).

use std::process::ExitCode;
use std::time::Instant;

use graphrw_kernels::fused::sdpa::sdpa_tuned;
use graphrw_kernels::fused::{sdpa, SdpaOptions};
use graphrw_kernels::{DType, KernelOptions, Tensor};

#[path = "support/cpu_time.rs"]
mod cpu_time;
use cpu_time::process_cpu_seconds;

/// One shape to time.
struct Spec {
    dtype: DType,
    d: usize,
    s: usize,
    causal: bool,
}

fn parse_spec(text: &str) -> Result<Spec, String> {
    let parts: Vec<&str> = text.split(',').collect();
    if parts.len() < 3 || parts.len() > 4 {
        return Err(format!("`{text}`: expected DTYPE,D,S[,causal]"));
    }
    let dtype = parse_dtype(text, parts[0])?;
    let num = |s: &str| {
        s.parse::<usize>()
            .map_err(|e| format!("`{text}`: `{s}`: {e}"))
    };
    let causal = match parts.get(3) {
        None => false,
        Some(&"causal") => true,
        Some(other) => return Err(format!("`{text}`: `{other}` is not `causal`")),
    };
    Ok(Spec {
        dtype,
        d: num(parts[1])?,
        s: num(parts[2])?,
        causal,
    })
}

/// Deterministic values in `[-1, 1)`.
fn ramp(dtype: DType, shape: &[usize], seed: usize) -> Result<Tensor, String> {
    let n: usize = shape.iter().product();
    let vals: Vec<f64> = (0..n)
        .map(|i| (((i + seed * 7) * 7919) % 1000) as f64 / 500.0 - 1.0)
        .collect();
    Tensor::from_f64_slice(dtype, shape, &vals).map_err(|e| e.to_string())
}

fn parse_dtype(text: &str, name: &str) -> Result<DType, String> {
    match name {
        "f32" => Ok(DType::F32),
        "f16" => Ok(DType::F16),
        "bf16" => Ok(DType::BF16),
        other => Err(format!("`{text}`: dtype `{other}` is not f32, f16 or bf16")),
    }
}

/// One decode shape: `DTYPE,HQ,HKV,D,SQ,SKV`.
struct DecodeSpec {
    dtype: DType,
    hq: usize,
    hkv: usize,
    d: usize,
    sq: usize,
    skv: usize,
}

fn parse_decode(text: &str) -> Result<DecodeSpec, String> {
    let parts: Vec<&str> = text.split(',').collect();
    let [dtype, rest @ ..] = &parts[..] else {
        return Err(format!("`{text}`: expected DTYPE,HQ,HKV,D,SQ,SKV"));
    };
    let nums = rest
        .iter()
        .map(|s| {
            s.parse::<usize>()
                .map_err(|e| format!("`{text}`: `{s}`: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let [hq, hkv, d, sq, skv] = nums[..] else {
        return Err(format!("`{text}`: expected DTYPE,HQ,HKV,D,SQ,SKV"));
    };
    Ok(DecodeSpec {
        dtype: parse_dtype(text, dtype)?,
        hq,
        hkv,
        d,
        sq,
        skv,
    })
}

/// Times the decode shapes (see the module docs).
fn run_decode(specs: &[String], repeat: usize, cpu_time: bool) -> Result<(), String> {
    let options = graphrw_kernels::options::vars::from_vars(|n| std::env::var(n).ok())?;
    let _options = options.install();
    let general = options.with_sdpa(options.sdpa.with_decode(false));
    let decode = options.with_sdpa(options.sdpa.with_decode(true).with_decode_min_keys(1));
    println!(
        "shape general_us materialised_us decode_us speedup decode_GB/s (threads {})",
        rayon::current_num_threads()
    );
    for text in specs {
        let s = parse_decode(text)?;
        if s.hkv == 0 || s.hq % s.hkv != 0 {
            return Err(format!("`{text}`: HQ must be a multiple of HKV"));
        }
        let q = ramp(s.dtype, &[1, s.hq, s.sq, s.d], 0)?;
        let k = ramp(s.dtype, &[1, s.hkv, s.skv, s.d], 1)?;
        let v = ramp(s.dtype, &[1, s.hkv, s.skv, s.d], 2)?;
        // K and V repeated to HQ heads, as a graph that materialises the groups has them.
        let rep = |t: &Tensor| -> Result<Tensor, String> {
            let x = t.to_f64_vec();
            let head = s.skv * s.d;
            let g = s.hq / s.hkv;
            let vals: Vec<f64> = (0..s.hq)
                .flat_map(|h| x[(h / g) * head..(h / g + 1) * head].iter().copied())
                .collect();
            Tensor::from_f64_slice(s.dtype, &[1, s.hq, s.skv, s.d], &vals)
                .map_err(|e| e.to_string())
        };
        let (km, vm) = (rep(&k)?, rep(&v)?);
        let grouped = SdpaOptions {
            enable_gqa: true,
            ..SdpaOptions::default()
        };
        let plain = SdpaOptions::default();
        let calls: [(&Tensor, &Tensor, &SdpaOptions, &KernelOptions); 3] = [
            (&k, &v, &grouped, &general),
            (&km, &vm, &plain, &general),
            (&k, &v, &grouped, &decode),
        ];
        let mut best = [f64::INFINITY; 3];
        for rep in 0..=repeat {
            for (i, &(k, v, opts, kernel)) in calls.iter().enumerate() {
                let (t0, c0) = (Instant::now(), process_cpu_seconds);
                let c0 = if cpu_time { c0()? } else { 0.0 };
                let out = sdpa_tuned(&q, k, v, None, opts, kernel).map_err(|e| e.to_string())?;
                let secs = if cpu_time {
                    process_cpu_seconds()? - c0
                } else {
                    t0.elapsed().as_secs_f64()
                };
                // Repetition 0 warms up (thread pool, page faults).
                if rep > 0 {
                    best[i] = best[i].min(secs);
                }
                std::hint::black_box(out);
            }
        }
        let kv_bytes = 2 * s.hkv * s.skv * s.d * s.dtype.size_in_bytes();
        println!(
            "{text} {:.1} {:.1} {:.1} {:.1}x {:.1}",
            best[0] * 1e6,
            best[1] * 1e6,
            best[2] * 1e6,
            best[0] / best[2],
            kv_bytes as f64 / best[2] / 1e9
        );
    }
    Ok(())
}

fn run() -> Result<(), String> {
    let mut repeat = 5usize;
    let mut heads = 8usize;
    let mut cpu_time = false;
    let mut decode = false;
    let mut choices = false;
    let mut specs = Vec::new();
    let mut decode_specs = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--cpu-time" => cpu_time = true,
            "--decode" => decode = true,
            "--choices" => choices = true,
            _ if decode && !a.starts_with("--") => decode_specs.push(a),
            "--repeat" | "--heads" => {
                let v = args
                    .next()
                    .ok_or_else(|| format!("{a} needs a value"))?
                    .parse::<usize>()
                    .map_err(|e| format!("{a}: {e}"))?;
                if a == "--repeat" {
                    repeat = v.max(1);
                } else {
                    heads = v.max(1);
                }
            }
            _ => specs.push(parse_spec(&a)?),
        }
    }
    if decode {
        if decode_specs.is_empty() || !specs.is_empty() {
            return Err("with --decode, give only shapes DTYPE,HQ,HKV,D,SQ,SKV".into());
        }
        return run_decode(&decode_specs, repeat, cpu_time);
    }
    if specs.is_empty() {
        return Err("give at least one shape DTYPE,D,S[,causal]".into());
    }
    // This harness, like the command, maps its environment onto the kernel options.
    let options = graphrw_kernels::options::vars::from_vars(|n| std::env::var(n).ok())?;
    let _options = options.install();
    for spec in specs {
        let shape = [1, heads, spec.s, spec.d];
        let q = ramp(spec.dtype, &shape, 0)?;
        let k = ramp(spec.dtype, &shape, 1)?;
        let v = ramp(spec.dtype, &shape, 2)?;
        let opts = SdpaOptions {
            is_causal: spec.causal,
            ..SdpaOptions::default()
        };
        // One warm-up call (thread pool, page faults), then the best of `repeat`.
        sdpa(&q, &k, &v, None, &opts).map_err(|e| e.to_string())?;
        let mut best = f64::INFINITY;
        for _ in 0..repeat {
            let (t0, c0) = (Instant::now(), process_cpu_seconds);
            let c0 = if cpu_time { c0()? } else { 0.0 };
            let out = sdpa(&q, &k, &v, None, &opts).map_err(|e| e.to_string())?;
            let secs = if cpu_time {
                process_cpu_seconds()? - c0
            } else {
                t0.elapsed().as_secs_f64()
            };
            best = best.min(secs);
            std::hint::black_box(out);
        }
        let mut flops = 4.0 * (heads * spec.s * spec.s * spec.d) as f64;
        if spec.causal {
            flops /= 2.0;
        }
        println!(
            "{},{},{},{} {:.4} {:.1}",
            spec.dtype,
            spec.d,
            spec.s,
            if spec.causal { "causal" } else { "full" },
            best * 1e3,
            flops / best / 1e9
        );
    }
    if choices {
        print_choices();
    }
    Ok(())
}

/// Prints the SDPA chooser's kept choices to stderr (see the module docs).
fn print_choices() {
    for (key, chosen) in graphrw_kernels::fused::sdpa::choice::global().choices() {
        let times: Vec<String> = chosen
            .candidates
            .iter()
            .map(|(k, t)| format!("{k:?} {:.3} ms", t.as_secs_f64() * 1e3))
            .collect();
        eprintln!("chose {:?} for {key}: {}", chosen.kernel, times.join(", "));
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

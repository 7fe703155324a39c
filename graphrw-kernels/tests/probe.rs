//! The FMA probe tells the truth: no product measured in the same process runs faster
//! than the peak it reports (the `gemm` crate's and each packed kernel's, on one
//! thread). A probe that counted one FMA port of a core with two, or 256-bit FMAs on a
//! core with 512-bit ones, reads half the peak and fails here.

use std::time::Instant;

use graphrw_kernels::cpu::probe::fma_peak_gflops;
use graphrw_kernels::cpu::{
    matmul_epilogue_with, CpuFeatures, Epilogue, GemmBackend, Isa, PackedWeight,
};
use graphrw_kernels::Tensor;

fn matrix(r: usize, c: usize, seed: usize) -> Tensor {
    let data = (0..r * c)
        .map(|i| ((i * 7919 + seed) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    Tensor::from_vec(vec![r, c], data).expect("tensor")
}

/// The best rate of `run` over `repeat` calls of `flops` each, GFLOP/s.
fn best_rate(flops: f64, repeat: usize, run: &dyn Fn() -> Tensor) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..repeat {
        let t = Instant::now();
        std::hint::black_box(run());
        best = best.min(t.elapsed().as_secs_f64());
    }
    flops / best / 1e9
}

#[test]
fn fma_probe_is_never_below_a_product_rate() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool");
    pool.install(|| {
        // Probed before and after the products, the better kept: a probe round that
        // shares its core with another process reads low.
        let before = fma_peak_gflops(1, 1_000_000);
        let (m, k, n) = (192, 512, 512);
        let (a, b) = (matrix(m, k, 1), matrix(k, n, 2));
        let flops = 2.0 * (m * k * n) as f64;
        let mut rates = Vec::new();
        // The `gemm` crate picks its own instruction set, which `GRAPHRW_ISA` does not
        // cap: beside a capped probe it would be measured at a level the probe is not.
        if CpuFeatures::get() == CpuFeatures::detected() {
            rates.push((
                "gemm".to_string(),
                best_rate(flops, 10, &|| {
                    matmul_epilogue_with(&a, &b, &Epilogue::default(), GemmBackend::Gemm)
                        .expect("product")
                }),
            ));
        }
        for isa in [Isa::Avx2Fma, Isa::Avx512] {
            let Some(w) = PackedWeight::new_for(&b, None, isa) else {
                continue;
            };
            let epilogue = Epilogue {
                packed: Some(&w),
                ..Epilogue::default()
            };
            let rate = best_rate(flops, 10, &|| {
                matmul_epilogue_with(&a, &b, &epilogue, GemmBackend::Auto).expect("product")
            });
            rates.push((format!("packed {isa:?}"), rate));
        }
        let (Some(before), Some(after)) = (before, fma_peak_gflops(1, 1_000_000)) else {
            println!("SKIPPED: the FMA probe needs x86-64 with AVX2+FMA");
            return;
        };
        let peak = before.max(after);
        let (name, best) = rates
            .iter()
            .max_by(|x, y| x.1.total_cmp(&y.1))
            .expect("a rate");
        println!("probe {peak:.1} GFLOP/s; products {rates:?}");
        // 10% for the noise of a shared machine: a probe that counts one FMA port of
        // two, or 256-bit FMAs on a core with 512-bit ones, reads half.
        assert!(
            peak >= 0.9 * best,
            "the FMA probe reads {peak:.1} GFLOP/s, below {name}'s {best:.1}"
        );
    });
}

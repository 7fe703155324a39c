//! The CUDA C source of every built-in generated kernel (and of its vjp kernels)
//! compiles to PTX with NVRTC, for f32, f16 and bf16 storage. Needs the `cuda` feature
//! and the NVRTC library (`GRAPHRW_NVRTC_LIB`, or the `nvidia-cuda-nvrtc` wheel of the
//! `python3` on the PATH); says `skipped` when NVRTC cannot be found.
#![cfg(feature = "cuda")]

use graphrw::fused::builtin;
use graphrw::kernels::cuda;

/// Points `GRAPHRW_NVRTC_LIB` at the NVRTC of the `nvidia-cuda-nvrtc` wheel when it is
/// unset and the wheel is installed for `python3`.
fn find_wheel_nvrtc() {
    if std::env::var_os("GRAPHRW_NVRTC_LIB").is_some() {
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
        std::env::set_var("GRAPHRW_NVRTC_LIB", &path);
    }
}

#[test]
fn nvrtc_compiles_every_generated_kernel() {
    find_wheel_nvrtc();
    if !cuda::nvrtc_available() {
        eprintln!("skipped: NVRTC not found: generated CUDA kernels not compiled");
        return;
    }
    let mut compiled = 0;
    for k in builtin::ALL {
        let mut sources = vec![(k.cuda.entry.to_string(), k.cuda.source)];
        for v in k.vjp {
            sources.push((format!("{}.vjp_{}", k.cuda.entry, v.param), v.cuda_source));
        }
        for (name, src) in sources {
            for dtype in ["0", "1", "2"] {
                let ptx = cuda::compile_ptx(src, &name, &[("DTYPE_ID", dtype)], "compute_80")
                    .unwrap_or_else(|e| panic!("{name} (DTYPE_ID {dtype}): {e}"));
                assert!(ptx.contains(".entry"), "{name}: no entry in the PTX");
                compiled += 1;
            }
        }
    }
    println!("compiled {compiled} generated kernels");
}

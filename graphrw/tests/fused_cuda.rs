//! The CUDA C source of every built-in generated kernel (and of its vjp kernels), after
//! the shared prelude, compiles to PTX with NVRTC for f32, f16 and bf16 storage, with its
//! entry point, and states the launch shape its descriptor gives. Needs the `cuda` feature
//! and the NVRTC library (`GRAPHRW_NVRTC_LIB`, or the `nvidia-cuda-nvrtc` wheel of the
//! `python3` on the PATH); says `skipped` when NVRTC cannot be found.
#![cfg(feature = "cuda")]

use graphrw::generated::{builtin, CudaLaunch};
use graphrw::kernels::cuda;

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

#[test]
fn nvrtc_compiles_every_generated_kernel() {
    find_wheel_nvrtc();
    if !cuda::nvrtc_available() {
        eprintln!("skipped: NVRTC not found: generated CUDA kernels not compiled");
        return;
    }
    let mut compiled = 0;
    for k in builtin::ALL {
        let mut sources = vec![(k.op.name.to_string(), k.cuda)];
        for v in k.vjp {
            sources.push((v.op.name.to_string(), v.cuda));
        }
        for (name, src) in sources {
            // The launch shape the executor uses is the one the source's header states.
            let rows = src.source.contains("// Launch: one block per row");
            assert_eq!(rows, src.launch == CudaLaunch::Rows, "{name}: launch");
            let full = cuda::generated_source(src.source);
            for dtype in ["0", "1", "2"] {
                let ptx = cuda::compile_ptx(&full, &name, &[("DTYPE_ID", dtype)], "compute_80")
                    .unwrap_or_else(|e| panic!("{name} (DTYPE_ID {dtype}): {e}"));
                let entry = format!(".entry {}(", src.entry);
                assert!(ptx.contains(&entry), "{name}: no `{entry}` in the PTX");
                compiled += 1;
            }
        }
    }
    assert_eq!(
        compiled,
        3 * builtin::ALL.iter().map(|k| 1 + k.vjp.len()).sum::<usize>()
    );
    println!("compiled {compiled} generated kernels");
}

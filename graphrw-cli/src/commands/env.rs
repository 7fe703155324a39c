//! The environment: the one place the `graphrw` command (and `python -m graphrw`, which
//! runs these commands) reads the `GRAPHRW_*` variables, mapped onto the library's
//! [`KernelOptions`] by [`graphrw::kernels::options::vars::from_vars`] (whose docs list
//! every variable, as does `graphrw --help`), and onto the CUDA runtime's NVRTC library.
//! The libraries themselves never read the environment.

use graphrw::kernels::options::vars;
use graphrw::KernelOptions;

/// The kernel options the `GRAPHRW_*` variables ask for (the defaults for every unset
/// one); an error names a variable whose value does not parse.
pub fn options_from_env() -> Result<KernelOptions, String> {
    vars::from_vars(|name| std::env::var(name).ok())
}

/// The NVRTC library `GRAPHRW_NVRTC_LIB` names, handed to the CUDA runtime before its
/// first compile (CUDA builds).
#[cfg(feature = "cuda")]
pub fn cuda_options_from_env() -> graphrw::kernels::cuda::CudaOptions {
    let o = graphrw::kernels::cuda::CudaOptions::default();
    match std::env::var_os("GRAPHRW_NVRTC_LIB") {
        Some(path) if !path.is_empty() => o.with_nvrtc_lib(path),
        _ => o,
    }
}

/// The `--help` section listing the variables.
pub fn help_section() -> String {
    vars::help_section()
}

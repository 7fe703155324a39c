//! CUDA tensors and kernels through [cudarc] (behind the `cuda` feature).
//!
//! Everything is loaded at run time (cudarc's dynamic loading): this module builds and
//! links on a machine with no CUDA at all, and [`CudaDevice::get`] answers an error (never
//! a panic) when the driver library or a device is missing.
//!
//! - [`CudaDevice`]: one per device ordinal and process, holding the context, the stream
//!   every call is ordered on, and the cache of kernels compiled by NVRTC at first use.
//! - [`CudaTensor`]: a contiguous device buffer with a dtype and a shape; host transfers
//!   through [`CudaDevice::upload`] and [`CudaTensor::to_host`].
//! - [`sdpa`]: fused scaled dot-product attention (flash-attention style; tensor cores for
//!   f16/bf16).
//!
//! Kernel sources live in `src/cuda/kernels/*.cu` ([`kernels::SOURCES`]) and are compiled
//! with NVRTC, specialised by preprocessor defines (dtype, head dims, mask kind, causal).
//! NVRTC comes from `libnvrtc.so*` on the library path; [`CudaOptions::nvrtc_lib`] (given
//! to [`CudaDevice::get_with`] or [`set_nvrtc_library`]) may name the library file
//! directly (it is loaded first, so the loader finds it by its soname). The `graphrw`
//! command sets it from `GRAPHRW_NVRTC_LIB`.
//!
//! ```no_run
//! use graphrw_kernels::cuda::{self, CudaDevice, SdpaOptions};
//! use graphrw_kernels::{DType, Tensor};
//!
//! let dev = CudaDevice::get(0)?;
//! let q = dev.upload(&Tensor::zeros(DType::F16, &[1, 8, 128, 64]))?;
//! let out = cuda::sdpa(&q, &q, &q, None, &SdpaOptions { is_causal: true, ..Default::default() })?;
//! let host: Tensor = out.to_host()?;
//! # Ok::<(), graphrw_kernels::KernelError>(())
//! ```

use std::collections::HashMap;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream};
use cudarc::nvrtc::CompileOptions;

use crate::{DType, KernelError, Tensor};

mod elementwise;
mod generated;
mod indexing;
mod launch;
mod layout;
mod matmul;
mod reduce;
mod sdpa;
mod tensor;

/// The cudarc crate this module is built on (for streams, events and raw buffers).
pub use cudarc;
pub use elementwise::{binary, cast, unary, where_};
pub use generated::{generated_source, run_generated, GeneratedKernel, GeneratedLaunch};
pub use indexing::{gather, gather_elements, gather_nd, index_select};
pub use layout::{concat, contiguous, expand, permute, slice, split, transpose};
pub use matmul::matmul;
pub use reduce::{layer_norm, log_softmax, reduce, rms_norm, softmax};
pub use sdpa::{sdpa, SdpaOptions};
pub use tensor::CudaTensor;

/// The CUDA C sources of the kernels, compiled by NVRTC at first use.
pub mod kernels {
    /// The one f16/bf16 prelude (conversions; `elem_t`, `load_elem`, `store_elem` for
    /// `DTYPE_ID`) that starts every source below and every generated kernel.
    pub const HALF: &str = include_str!("kernels/half.cuh");

    /// What precedes the source of a kernel `fused_kernel!` generates ([`HALF`] and the
    /// helpers of `generated.cuh`); see [`generated_source`](super::generated_source).
    pub const GENERATED_PRELUDE: &str = concat!(
        include_str!("kernels/half.cuh"),
        include_str!("kernels/generated.cuh")
    );

    /// Fused scaled dot-product attention (`sdpa_mma` for f16/bf16 on tensor cores,
    /// `sdpa_generic` for everything else).
    pub const SDPA: &str = concat!(
        include_str!("kernels/half.cuh"),
        include_str!("kernels/sdpa.cu")
    );

    /// Elementwise ops with broadcasting and casts (with the shared prelude).
    pub const ELEMENTWISE: &str = concat!(
        include_str!("kernels/half.cuh"),
        include_str!("kernels/common.cuh"),
        include_str!("kernels/elementwise.cu")
    );

    /// Strided copies and gathers by index (with the shared prelude).
    pub const LAYOUT: &str = concat!(
        include_str!("kernels/half.cuh"),
        include_str!("kernels/common.cuh"),
        include_str!("kernels/layout.cu")
    );

    /// Softmax, layer/rms norm and reductions (with the shared prelude).
    pub const REDUCE: &str = concat!(
        include_str!("kernels/half.cuh"),
        include_str!("kernels/common.cuh"),
        include_str!("kernels/reduce.cu")
    );

    /// A set of `-D NAME=VALUE` defines.
    pub type Defines = &'static [(&'static str, &'static str)];

    /// Every kernel source with its file name, and sets of defines that together
    /// instantiate every code path (used by the NVRTC compile test).
    pub const SOURCES: &[(&str, &str, &[Defines])] = &[
        (
            "elementwise.cu",
            ELEMENTWISE,
            &[
                &[
                    ("NIN", "1"),
                    ("OP", "0"),
                    ("DT_O", "3"),
                    ("DT_A", "0"),
                    ("ACC", "0"),
                ],
                &[
                    ("NIN", "1"),
                    ("OP", "0"),
                    ("DT_O", "0"),
                    ("DT_A", "3"),
                    ("ACC", "2"),
                ],
                &[("NIN", "1"), ("OP", "10"), ("DT_O", "1"), ("ACC", "0")],
                &[("NIN", "1"), ("OP", "15"), ("DT_O", "2"), ("ACC", "0")],
                &[("NIN", "1"), ("OP", "12"), ("DT_O", "6"), ("ACC", "1")],
                &[
                    ("NIN", "1"),
                    ("OP", "18"),
                    ("DT_O", "5"),
                    ("DT_A", "0"),
                    ("ACC", "0"),
                ],
                &[("NIN", "1"), ("OP", "17"), ("DT_O", "5"), ("ACC", "2")],
                &[("NIN", "1"), ("OP", "1"), ("DT_O", "3"), ("ACC", "2")],
                &[
                    ("NIN", "2"),
                    ("OP", "24"),
                    ("DT_O", "0"),
                    ("DT_B", "3"),
                    ("ACC", "0"),
                ],
                &[("NIN", "2"), ("OP", "25"), ("DT_O", "4"), ("ACC", "2")],
                &[("NIN", "2"), ("OP", "27"), ("DT_O", "5"), ("ACC", "2")],
                &[
                    ("NIN", "2"),
                    ("OP", "31"),
                    ("DT_O", "5"),
                    ("DT_A", "1"),
                    ("ACC", "0"),
                ],
                &[
                    ("NIN", "3"),
                    ("OP", "40"),
                    ("DT_O", "0"),
                    ("DT_A", "5"),
                    ("DT_B", "0"),
                    ("ACC", "0"),
                ],
            ],
        ),
        (
            "layout.cu",
            LAYOUT,
            &[
                &[("ESZ", "1"), ("IDX_DT", "3")],
                &[("ESZ", "2"), ("IDX_DT", "4")],
                &[("ESZ", "4"), ("IDX_DT", "3")],
                &[("ESZ", "8"), ("IDX_DT", "3")],
            ],
        ),
        (
            "reduce.cu",
            REDUCE,
            &[
                &[("DT", "0"), ("LOG", "1"), ("HAS_W", "1"), ("HAS_B", "1")],
                &[("DT", "1"), ("DT_W", "0"), ("HAS_W", "1"), ("RED", "2")],
                &[("DT", "2"), ("RMS", "1"), ("HAS_W", "1"), ("RED", "1")],
            ],
        ),
        (
            "sdpa.cu",
            SDPA,
            &[
                &[("DTYPE_ID", "0"), ("HEAD_DIM", "64"), ("MASK_KIND", "2")],
                &[("DTYPE_ID", "1"), ("HEAD_DIM", "128"), ("IS_CAUSAL", "1")],
                &[
                    ("DTYPE_ID", "2"),
                    ("HEAD_DIM", "128"),
                    ("M_TILES", "2"),
                    ("Q_IN_REGS", "0"),
                    ("BLOCK_N", "32"),
                    ("MASK_KIND", "1"),
                    ("IS_CAUSAL", "1"),
                ],
                &[("DTYPE_ID", "1"), ("HEAD_DIM", "64"), ("M_TILES", "2")],
                &[("DTYPE_ID", "2"), ("HEAD_DIM", "64"), ("MASK_KIND", "1")],
                &[
                    ("DTYPE_ID", "1"),
                    ("HEAD_DIM", "256"),
                    ("HEAD_DIM_V", "96"),
                    ("Q_IN_REGS", "0"),
                    ("BLOCK_N", "32"),
                    ("MASK_KIND", "3"),
                ],
                &[("DTYPE_ID", "2"), ("HEAD_DIM", "40"), ("MASK_KIND", "4")],
            ],
        ),
    ];
}

/// A CUDA failure as a [`KernelError`].
pub(crate) fn cuda_err(what: &str, e: impl fmt::Debug) -> KernelError {
    KernelError::Unsupported {
        op: "cuda",
        msg: format!("{what}: {e:?}"),
    }
}

/// Options of the CUDA runtime (`Default`: NVRTC found on the library path).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CudaOptions {
    /// The NVRTC library file (`libnvrtc.so.*`) to load before the first compile.
    pub nvrtc_lib: Option<std::path::PathBuf>,
}

impl CudaOptions {
    /// Loads NVRTC from `path` (the file itself, e.g. a pip wheel's `libnvrtc.so.12`).
    pub fn with_nvrtc_lib(mut self, path: impl Into<std::path::PathBuf>) -> CudaOptions {
        self.nvrtc_lib = Some(path.into());
        self
    }
}

/// The NVRTC library named by [`set_nvrtc_library`] (loaded once, at the first compile).
static NVRTC_LIB: Mutex<Option<std::path::PathBuf>> = Mutex::new(None);

/// Names the NVRTC library file to load before the first kernel compile of this process
/// (a later call, after NVRTC was loaded, has no effect).
pub fn set_nvrtc_library(path: impl Into<std::path::PathBuf>) {
    let mut lib = NVRTC_LIB.lock().unwrap_or_else(|e| e.into_inner());
    *lib = Some(path.into());
}

fn preload_nvrtc() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let named = NVRTC_LIB.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(path) = named {
            // NVRTC opens its builtins library by soname: load the one beside it first.
            let dir = path.parent().map(|p| p.to_path_buf());
            let builtins = dir
                .and_then(|d| std::fs::read_dir(d).ok())
                .into_iter()
                .flatten()
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("libnvrtc-builtins.so"))
                });
            for lib in builtins.chain(std::iter::once(path.clone())) {
                // SAFETY: loading NVRTC runs only its initialisers; the handle is leaked so
                // the library stays loaded for cudarc, which then finds it by its soname.
                match unsafe { libloading::Library::new(&lib) } {
                    Ok(l) => std::mem::forget(l),
                    Err(e) => eprintln!("graphrw-kernels: NVRTC library {}: {e}", lib.display()),
                }
            }
        }
    });
}

/// Whether the CUDA driver library (`libcuda.so`) can be loaded.
pub fn driver_available() -> bool {
    // SAFETY: only tries to dlopen the library and drops the handle.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Whether the NVRTC library can be loaded (see the module docs for [`CudaOptions`]).
pub fn nvrtc_available() -> bool {
    preload_nvrtc();
    // SAFETY: only tries to dlopen the library and drops the handle.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// The number of CUDA devices; 0 when the driver is missing or reports none.
pub fn device_count() -> usize {
    if !driver_available() {
        return 0;
    }
    catch_unwind(CudaContext::device_count)
        .ok()
        .and_then(|r| r.ok())
        .map_or(0, |n| n.max(0) as usize)
}

/// Compiles `src` to PTX with NVRTC for `arch` (`compute_80`, `compute_90`, ...), with
/// `defines` passed as `-D NAME=VALUE`.
pub fn compile_ptx(
    src: &str,
    name: &str,
    defines: &[(&str, &str)],
    arch: &'static str,
) -> Result<String, KernelError> {
    if !nvrtc_available() {
        return Err(KernelError::Unsupported {
            op: "cuda",
            msg: "NVRTC (libnvrtc.so) not found: put it on the library path or name it \
                  (CudaOptions::nvrtc_lib; the graphrw command: GRAPHRW_NVRTC_LIB)"
                .into(),
        });
    }
    let mut options: Vec<String> = defines.iter().map(|(k, v)| format!("-D{k}={v}")).collect();
    options.push("--std=c++17".into());
    let opts = CompileOptions {
        arch: Some(arch),
        options,
        name: Some(name.to_string()),
        ..Default::default()
    };
    let ptx = catch_unwind(AssertUnwindSafe(|| {
        cudarc::nvrtc::compile_ptx_with_opts(src, opts)
    }))
    .map_err(|_| cuda_err("nvrtc", "panicked (library symbols missing?)"))?;
    match ptx {
        Ok(p) => Ok(p.to_src()),
        Err(cudarc::nvrtc::CompileError::CompileError { log, .. }) => {
            Err(KernelError::Unsupported {
                op: "cuda",
                msg: format!("nvrtc failed on {name}:\n{}", log.to_string_lossy()),
            })
        }
        Err(e) => Err(cuda_err("nvrtc", e)),
    }
}

fn arch_of(cc: (i32, i32)) -> &'static str {
    match cc {
        (9, 0) => "compute_90",
        (8, 9) => "compute_89",
        (8, 6) => "compute_86",
        (8, 7) => "compute_87",
        (8, 0) => "compute_80",
        (m, _) if m >= 10 => "compute_90",
        _ => "compute_75",
    }
}

/// One CUDA device: its context, the stream every call is ordered on, and the kernels
/// compiled for it so far (one per source and set of defines, for the process's life).
pub struct CudaDevice {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    name: String,
    cc: (i32, i32),
    functions: Mutex<HashMap<String, CudaFunction>>,
    blas: OnceLock<Result<Mutex<CudaBlas>, String>>,
}

impl fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CudaDevice(cuda:{} {} sm_{}{})",
            self.ordinal(),
            self.name,
            self.cc.0,
            self.cc.1
        )
    }
}

impl CudaDevice {
    /// The device `ordinal`, opened once per process (later calls share it).
    ///
    /// Errors (never panics) when the driver library is missing, there is no such device,
    /// or the device is older than compute capability 7.5.
    pub fn get(ordinal: usize) -> Result<Arc<CudaDevice>, KernelError> {
        CudaDevice::open(ordinal)
    }

    /// [`CudaDevice::get`] with `options`: its NVRTC library is the one loaded at the
    /// first compile of the process (when none was loaded yet).
    pub fn get_with(ordinal: usize, options: &CudaOptions) -> Result<Arc<CudaDevice>, KernelError> {
        if let Some(path) = &options.nvrtc_lib {
            set_nvrtc_library(path.clone());
        }
        CudaDevice::open(ordinal)
    }

    fn open(ordinal: usize) -> Result<Arc<CudaDevice>, KernelError> {
        static DEVICES: OnceLock<Mutex<HashMap<usize, Arc<CudaDevice>>>> = OnceLock::new();
        let mut map = DEVICES
            .get_or_init(Default::default)
            .lock()
            .map_err(|_| cuda_err("device table", "poisoned"))?;
        if let Some(d) = map.get(&ordinal) {
            return Ok(d.clone());
        }
        if !driver_available() {
            return Err(KernelError::Unsupported {
                op: "cuda",
                msg: "no CUDA driver (libcuda.so not found)".into(),
            });
        }
        let n = device_count();
        if ordinal >= n {
            return Err(KernelError::Unsupported {
                op: "cuda",
                msg: format!("no CUDA device {ordinal} ({n} found)"),
            });
        }
        let opened = catch_unwind(|| -> Result<CudaDevice, KernelError> {
            let ctx = CudaContext::new(ordinal).map_err(|e| cuda_err("context", e))?;
            let cc = ctx
                .compute_capability()
                .map_err(|e| cuda_err("compute capability", e))?;
            let name = ctx.name().unwrap_or_else(|_| "unknown".into());
            let stream = ctx.default_stream();
            Ok(CudaDevice {
                ctx,
                stream,
                name,
                cc,
                functions: Mutex::new(HashMap::new()),
                blas: OnceLock::new(),
            })
        })
        .map_err(|_| cuda_err("driver", "panicked (library symbols missing?)"))??;
        if opened.cc < (7, 5) {
            return Err(KernelError::Unsupported {
                op: "cuda",
                msg: format!(
                    "device {} has compute capability {}.{}; 7.5 or newer is needed",
                    opened.name, opened.cc.0, opened.cc.1
                ),
            });
        }
        let dev = Arc::new(opened);
        map.insert(ordinal, dev.clone());
        Ok(dev)
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.ctx.ordinal()
    }

    /// The device's name (`NVIDIA H100 80GB HBM3`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Compute capability (major, minor).
    pub fn compute_capability(&self) -> (i32, i32) {
        self.cc
    }

    /// The stream every call of this crate is ordered on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Device memory in use, in bytes: total minus free as the driver reports it (every
    /// context on the device counts, this process's cached pool memory included).
    pub fn memory_used(&self) -> Result<usize, KernelError> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| cuda_err("bind context", e))?;
        let (free, total) = self
            .ctx
            .mem_get_info()
            .map_err(|e| cuda_err("memory info", e))?;
        Ok(total.saturating_sub(free))
    }

    /// Waits until every queued call has finished.
    pub fn synchronize(&self) -> Result<(), KernelError> {
        self.stream
            .synchronize()
            .map_err(|e| cuda_err("synchronize", e))
    }

    /// A device tensor holding a copy of `t` (any dtype).
    pub fn upload(self: &Arc<Self>, t: &Tensor) -> Result<CudaTensor, KernelError> {
        let bytes = t.to_raw_bytes();
        let buf = if bytes.is_empty() {
            self.stream.alloc_zeros::<u8>(1)
        } else {
            self.stream.clone_htod(&bytes)
        }
        .map_err(|e| cuda_err("upload", e))?;
        Ok(CudaTensor::from_buffer(
            self.clone(),
            buf,
            t.dtype(),
            t.shape().to_vec(),
        ))
    }

    /// A zero-filled device tensor.
    pub fn zeros(
        self: &Arc<Self>,
        dtype: DType,
        shape: &[usize],
    ) -> Result<CudaTensor, KernelError> {
        let n = shape
            .iter()
            .try_fold(dtype.size_in_bytes(), |a, &d| a.checked_mul(d))
            .ok_or_else(|| KernelError::shape("cuda alloc", format!("{shape:?} is too large")))?;
        let buf = self
            .stream
            .alloc_zeros::<u8>(n.max(1))
            .map_err(|e| cuda_err("alloc", e))?;
        Ok(CudaTensor::from_buffer(
            self.clone(),
            buf,
            dtype,
            shape.to_vec(),
        ))
    }

    /// A device buffer holding `data` (kernel parameters: offsets and the like).
    pub(crate) fn upload_i64(&self, data: &[i64]) -> Result<CudaSlice<i64>, KernelError> {
        if data.is_empty() {
            return self
                .stream
                .alloc_zeros::<i64>(1)
                .map_err(|e| cuda_err("upload", e));
        }
        self.stream
            .clone_htod(data)
            .map_err(|e| cuda_err("upload", e))
    }

    /// The device's cuBLAS handle, created at first use (an error, never a panic, when
    /// the cuBLAS library cannot be loaded).
    pub(crate) fn blas(&self) -> Result<std::sync::MutexGuard<'_, CudaBlas>, KernelError> {
        let blas = self.blas.get_or_init(|| {
            // SAFETY: only tries to dlopen the library and drops the handle.
            if !unsafe { cudarc::cublas::sys::is_culib_present() } {
                return Err("cuBLAS (libcublas.so) not found".to_string());
            }
            let stream = self.stream.clone();
            match catch_unwind(AssertUnwindSafe(|| CudaBlas::new(stream))) {
                Ok(Ok(b)) => Ok(Mutex::new(b)),
                Ok(Err(e)) => Err(format!("cuBLAS handle: {e:?}")),
                Err(_) => Err("cuBLAS panicked (library symbols missing?)".to_string()),
            }
        });
        match blas {
            Ok(m) => m.lock().map_err(|_| cuda_err("cublas", "poisoned")),
            Err(e) => Err(KernelError::Unsupported {
                op: "cuda matmul",
                msg: e.clone(),
            }),
        }
    }

    /// The NVRTC architecture this device compiles for.
    pub(crate) fn arch(&self) -> &'static str {
        arch_of(self.cc)
    }

    /// The kernel `func` of `src` built with `defines`: compiled and loaded at first use,
    /// then taken from the cache.
    pub(crate) fn function(
        &self,
        src_name: &str,
        src: &str,
        defines: &[(&str, String)],
        func: &str,
    ) -> Result<CudaFunction, KernelError> {
        self.function_with(src_name, || src.to_string(), defines, func)
    }

    /// [`CudaDevice::function`] with the source made only when it is compiled (the
    /// cache key is `src_name`, `func` and the defines).
    pub(crate) fn function_with(
        &self,
        src_name: &str,
        src: impl FnOnce() -> String,
        defines: &[(&str, String)],
        func: &str,
    ) -> Result<CudaFunction, KernelError> {
        let key = format!(
            "{src_name}:{func}:{}",
            defines
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        );
        let mut cache = self
            .functions
            .lock()
            .map_err(|_| cuda_err("kernel cache", "poisoned"))?;
        if let Some(f) = cache.get(&key) {
            return Ok(f.clone());
        }
        let defs: Vec<(&str, &str)> = defines.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let ptx = compile_ptx(&src(), src_name, &defs, self.arch())?;
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
            .map_err(|e| cuda_err("load module", e))?;
        let f = module
            .load_function(func)
            .map_err(|e| cuda_err("load function", e))?;
        cache.insert(key, f.clone());
        Ok(f)
    }
}

//! `graphrw run --device cuda[:N]`: run a model on its ONNX test data on a GPU (feature
//! `cuda` of graphrw-cli), with the CUDA stack (built-in ops and generated kernels on
//! the device, the CPU for the rest), and report the time of a cold run (kernels
//! compiled by NVRTC on the way) and of a warm one, the peak bytes of live
//! intermediates, and the device memory in use. `--device cpu` (the default) is the
//! ordinary `graphrw run`.

use std::path::Path;

use super::CmdResult;

/// Where `graphrw run` runs a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    /// The reference CPU executor.
    Cpu,
    /// The CUDA stack on device `ordinal`.
    Cuda(usize),
}

impl std::str::FromStr for Device {
    type Err = String;
    fn from_str(s: &str) -> Result<Device, String> {
        match s {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            _ => match s.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(n)) => Ok(Device::Cuda(n)),
                _ => Err(format!("unknown device {s:?}: write cpu, cuda or cuda:N")),
            },
        }
    }
}

/// Runs `graphrw run` on `device`.
pub fn run(
    model_dir: &Path,
    model: Option<&Path>,
    device: Device,
    opts: &super::run::RunOptions,
) -> CmdResult {
    match device {
        Device::Cpu => super::run::run(model_dir, model, opts),
        Device::Cuda(ordinal) => cuda::run(model_dir, model, ordinal, opts.kernel),
    }
}

#[cfg(not(feature = "cuda"))]
mod cuda {
    use std::path::Path;

    use super::CmdResult;

    pub fn run(_: &Path, _: Option<&Path>, _: usize, _: graphrw::KernelOptions) -> CmdResult {
        Err("this graphrw was built without CUDA: build graphrw-cli with `--features cuda`".into())
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use graphrw::exec::{cuda_stack, plan_with, CudaExecutor, Executor};
    use graphrw::KernelOptions;
    use graphrw::Tensor;

    use super::super::run::{report_output, test_sets, verdict};
    use super::CmdResult;

    const MIB: f64 = 1024.0 * 1024.0;

    /// `dir/PREFIX<N>.pb` for N = 0, 1, ... while they exist.
    fn numbered(dir: &Path, prefix: &str) -> Vec<PathBuf> {
        (0..)
            .map(|i| dir.join(format!("{prefix}{i}.pb")))
            .take_while(|p| p.exists())
            .collect()
    }

    pub fn run(
        model_dir: &Path,
        model: Option<&Path>,
        ordinal: usize,
        kernel: KernelOptions,
    ) -> CmdResult {
        let model_path = model
            .map(Path::to_path_buf)
            .unwrap_or_else(|| model_dir.join("model.onnx"));
        let graph = super::super::load(&model_path)?;
        let device_err = |e: graphrw::kernels::KernelError| format!("cuda:{ordinal}: {e}");
        // NVRTC from `GRAPHRW_NVRTC_LIB`, named before the first compile.
        graphrw::kernels::cuda::CudaDevice::get_with(
            ordinal,
            &super::super::env::cuda_options_from_env(),
        )
        .map_err(device_err)?;
        let cuda = CudaExecutor::new(ordinal).map_err(device_err)?;
        // cuda_stack with this executor first (so its name and device are at hand).
        let mut stack: Vec<Arc<dyn Executor>> = vec![Arc::new(cuda.clone())];
        stack.extend(cuda_stack(ordinal).map_err(device_err)?.into_iter().skip(1));
        let p = plan_with(&graph, &stack, kernel)?;
        let on_gpu = p.assignments().filter(|(_, e)| *e == cuda.name()).count();
        let total = p.assignments().count();
        println!(
            "model: {} ({} nodes) on {:?}: {on_gpu} of {total} kernel nodes on the GPU",
            model_path.display(),
            graph.node_count(),
            cuda.device()
        );
        let sets = test_sets(model_dir)?;
        if sets.is_empty() {
            return Err(format!(
                "no test_data_set_* folders in {}",
                super::super::short_path(model_dir)
            )
            .into());
        }
        let mut all_ok = true;
        for set in sets {
            let set_name = set
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let inputs: Vec<Tensor> = numbered(&set, "input_")
                .iter()
                .map(|p| graphrw::onnx::read_tensor_pb(p).map(|(_, t)| t))
                .collect::<Result<_, _>>()?;
            let expected: Vec<Tensor> = numbered(&set, "output_")
                .iter()
                .map(|p| graphrw::onnx::read_tensor_pb(p).map(|(_, t)| t))
                .collect::<Result<_, _>>()?;
            let before = cuda.device().memory_used()?;
            let (_, cold) = p.run(&inputs).map_err(|e| format!("{set_name}: {e}"))?;
            let (outputs, warm) = p.run(&inputs).map_err(|e| format!("{set_name}: {e}"))?;
            let after = cuda.device().memory_used()?;
            println!(
                "{set_name}: cold run (NVRTC compiles included) {:.2} ms, warm run {:.2} ms; \
                 peak live intermediates {:.1} MiB; device memory in use {:.1} MiB \
                 ({:+.1} MiB over the runs)",
                cold.total.as_secs_f64() * 1e3,
                warm.total.as_secs_f64() * 1e3,
                warm.peak_live_bytes as f64 / MIB,
                after as f64 / MIB,
                (after as f64 - before as f64) / MIB
            );
            for (k, (want, got)) in expected.iter().zip(&outputs).enumerate() {
                all_ok &= report_output(&format!("output {k}"), got, want);
            }
        }
        verdict(all_ok)
    }
}

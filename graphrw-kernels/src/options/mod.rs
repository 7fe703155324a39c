//! [`KernelOptions`]: the settings kernels run with (instruction set, weight packing,
//! SDPA tuning, threads, tensor budget), passed by the caller, never read from the
//! environment.
//!
//! `KernelOptions::default()` detects everything: the best instruction set this CPU has,
//! packed weights on, the tuned SDPA blocks, rayon's global pool and the machine's
//! memory as the budget. graphrw's `Plan` carries one and hands it to its executors;
//! kernels deep in a call read the one [`installed`](KernelOptions::install) on their
//! thread ([`KernelOptions::current`]), the default where none is. [`vars`] maps the
//! `graphrw` command's `GRAPHRW_*` environment variables onto them.
//!
//! ```
//! use graphrw_kernels::{cpu::Isa, KernelOptions};
//!
//! let opts = KernelOptions::default()
//!     .with_max_isa(Isa::Avx2Fma)
//!     .with_pack_weights(false)
//!     .with_threads(4);
//! assert!(opts.isa() <= Isa::Avx2Fma);
//! assert_eq!(opts.threads, Some(4));
//! ```

mod product;
pub mod vars;

use std::cell::Cell;
use std::fmt;
use std::str::FromStr;

use crate::cpu::{Broadcast, Isa};

pub use product::{ProductChoice, ProductKernel};

/// The settings kernels run with (see the [module docs](self)).
///
/// Build one with `KernelOptions::default()` and the `with_*` methods; the fields are
/// public to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KernelOptions {
    /// The highest instruction set any kernel may use (`None`: the best this CPU has).
    /// A lower one tests the AVX2 or portable paths on an AVX-512 machine.
    pub max_isa: Option<Isa>,
    /// A further cap for the generated (fused elementwise) kernels and the matmul
    /// epilogue's activation.
    pub fused_max_isa: Option<Isa>,
    /// Pack constant matmul weights once, at plan time, for the packed GEMM (default:
    /// on).
    pub pack_weights: bool,
    /// Threads for a plan's kernels (`None`: rayon's global pool, one per core).
    pub threads: Option<usize>,
    /// The largest tensor, in bytes, a kernel may allocate (`None`: the machine's
    /// memory, see [`crate::budget`]).
    pub max_tensor_bytes: Option<u64>,
    /// The fused SDPA kernels' tuning.
    pub sdpa: SdpaTuning,
    /// How a product by a constant weight picks its kernel (default: measured on this
    /// CPU, see [`crate::cpu::choice`]).
    pub product_kernel: ProductChoice,
    /// Keep the pool's other workers polling for work through a plan's run instead of
    /// sleeping between kernels (default: on; see [`crate::cpu::awake`]).
    pub keep_workers_awake: bool,
}

impl Default for KernelOptions {
    fn default() -> KernelOptions {
        KernelOptions {
            max_isa: None,
            fused_max_isa: None,
            pack_weights: true,
            threads: None,
            max_tensor_bytes: None,
            sdpa: SdpaTuning::default(),
            product_kernel: ProductChoice::Measure,
            keep_workers_awake: true,
        }
    }
}

impl KernelOptions {
    /// The defaults: detect everything (as `Default`).
    pub fn new() -> KernelOptions {
        KernelOptions::default()
    }

    /// Caps the instruction set every kernel may use at `isa`.
    pub fn with_max_isa(mut self, isa: Isa) -> KernelOptions {
        self.max_isa = Some(isa);
        self
    }

    /// Caps the generated elementwise kernels' instruction set at `isa`.
    pub fn with_fused_max_isa(mut self, isa: Isa) -> KernelOptions {
        self.fused_max_isa = Some(isa);
        self
    }

    /// Turns plan-time weight packing on or off.
    pub fn with_pack_weights(mut self, on: bool) -> KernelOptions {
        self.pack_weights = on;
        self
    }

    /// Runs a plan's kernels on `n` threads (0: rayon's global pool).
    pub fn with_threads(mut self, n: usize) -> KernelOptions {
        self.threads = (n > 0).then_some(n);
        self
    }

    /// Sets the largest tensor a kernel may allocate to `bytes` (0: the default).
    pub fn with_max_tensor_bytes(mut self, bytes: u64) -> KernelOptions {
        self.max_tensor_bytes = (bytes > 0).then_some(bytes);
        self
    }

    /// Sets how products by a constant weight pick their kernel.
    pub fn with_product_kernel(mut self, choice: ProductChoice) -> KernelOptions {
        self.product_kernel = choice;
        self
    }

    /// Turns the pollers that keep a run's workers awake on or off.
    pub fn with_keep_workers_awake(mut self, on: bool) -> KernelOptions {
        self.keep_workers_awake = on;
        self
    }

    /// Replaces the SDPA tuning.
    pub fn with_sdpa(mut self, sdpa: SdpaTuning) -> KernelOptions {
        self.sdpa = sdpa;
        self
    }

    /// The instruction set kernels run with: the best this CPU has, capped by
    /// [`max_isa`](Self::max_isa). Never above the CPU's, so code for it may run.
    pub fn isa(&self) -> Isa {
        cap(Isa::best(), self.max_isa)
    }

    /// The generated elementwise kernels' instruction set: [`isa`](Self::isa) capped by
    /// [`fused_max_isa`](Self::fused_max_isa).
    pub fn fused_isa(&self) -> Isa {
        cap(self.isa(), self.fused_max_isa)
    }

    /// The fused SDPA kernels' instruction set: [`isa`](Self::isa) capped by
    /// [`SdpaTuning::max_isa`].
    pub fn sdpa_isa(&self) -> Isa {
        cap(self.isa(), self.sdpa.max_isa)
    }

    /// Installs these options on the current thread until the guard is dropped:
    /// [`KernelOptions::current`] called on this thread returns them. (Kernels read them
    /// on the calling thread, before they split work over rayon's.)
    pub fn install(&self) -> OptionsGuard {
        let previous = CURRENT.with(|c| c.replace(Some(*self)));
        OptionsGuard { previous }
    }

    /// The options installed on this thread, else the defaults.
    pub fn current() -> KernelOptions {
        CURRENT.with(|c| c.get()).unwrap_or_default()
    }
}

fn cap(isa: Isa, max: Option<Isa>) -> Isa {
    max.map_or(isa, |m| isa.min(m))
}

thread_local! {
    static CURRENT: Cell<Option<KernelOptions>> = const { Cell::new(None) };
}

/// Restores the thread's previous options when dropped (also on unwinding).
#[must_use = "the options are installed only while the guard lives"]
pub struct OptionsGuard {
    previous: Option<KernelOptions>,
}

impl Drop for OptionsGuard {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.previous));
    }
}

impl fmt::Debug for OptionsGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OptionsGuard")
    }
}

/// The fused SDPA kernels' tuning (`Default`: the measured best on this CPU).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SdpaTuning {
    /// A cap on the SDPA kernels' instruction set, over [`KernelOptions::max_isa`]
    /// (`Avx2Fma` keeps the AVX2 path on an AVX-512 CPU; `Baseline` the portable loops).
    pub max_isa: Option<Isa>,
    /// Pack K and V into panels (the packed path); off reads them in place.
    pub pack: bool,
    /// Fuse the softmax step into the score tile where the packed path can.
    pub fuse_softmax: bool,
    /// Use the AVX2 micro-tiles of the in-place path.
    pub micro_kernels: bool,
    /// Query and key block sizes (`None`: the tuned constants).
    pub blocks: Option<SdpaBlocks>,
    /// The packed path's loop orders.
    pub loop_order: SdpaLoopOrder,
    /// The CUDA kernel's launch configuration (`None`: chosen by shape).
    pub cuda: Option<SdpaCudaConfig>,
    /// Take the CPU decode path (few query rows over many keys, work split over key
    /// blocks: `graphrw_kernels::fused::sdpa::SdpaKernel::Decode`) where it applies
    /// (default: on); off runs the general kernel on every shape.
    pub decode: bool,
    /// The fewest keys for which the decode path runs (`None`: the measured
    /// `graphrw_kernels::fused::sdpa::DECODE_MIN_KEYS`).
    pub decode_min_keys: Option<usize>,
    /// Time the variants (decode path on and off, AVX-512 in both broadcast forms and
    /// AVX2) on the first call of each kind of shape and keep the fastest
    /// ([`crate::fused::sdpa::choice`]).
    pub choose: bool,
    /// How the AVX-512 packed kernels' depth loops broadcast each key element (scores)
    /// and probability (values): inside each FMA, or into a register once
    /// ([`Broadcast`]; the same results). With [`SdpaTuning::choose`] on, the chooser
    /// times both; this pins the form where it is off.
    pub broadcast: Broadcast,
    /// bf16 inputs on the AVX-512 packed path run both products on AVX-512 BF16 dot
    /// products (`vdpbf16ps`; default); off, they are converted to f32 and run on the
    /// f32 FMAs (a core whose `vdpbf16ps` runs at half the f32 FMA's rate, such as the
    /// Intel Xeon family 6 model 167 measured, does more on the FMAs). The chooser
    /// times both.
    pub bf16_dot_products: bool,
}

impl Default for SdpaTuning {
    fn default() -> SdpaTuning {
        SdpaTuning {
            max_isa: None,
            pack: true,
            fuse_softmax: true,
            micro_kernels: true,
            blocks: None,
            loop_order: SdpaLoopOrder::default(),
            cuda: None,
            decode: true,
            decode_min_keys: None,
            choose: true,
            broadcast: Broadcast::InFma,
            bf16_dot_products: true,
        }
    }
}

impl SdpaTuning {
    /// Caps the SDPA kernels' instruction set at `isa`.
    pub fn with_max_isa(mut self, isa: Isa) -> SdpaTuning {
        self.max_isa = Some(isa);
        self
    }

    /// Turns K/V packing on or off.
    pub fn with_pack(mut self, on: bool) -> SdpaTuning {
        self.pack = on;
        self
    }

    /// Turns the fused softmax step on or off.
    pub fn with_fuse_softmax(mut self, on: bool) -> SdpaTuning {
        self.fuse_softmax = on;
        self
    }

    /// Turns the in-place path's AVX2 micro-tiles on or off.
    pub fn with_micro_kernels(mut self, on: bool) -> SdpaTuning {
        self.micro_kernels = on;
        self
    }

    /// Sets the block sizes.
    pub fn with_blocks(mut self, blocks: SdpaBlocks) -> SdpaTuning {
        self.blocks = Some(blocks);
        self
    }

    /// Sets the packed path's loop orders.
    pub fn with_loop_order(mut self, order: SdpaLoopOrder) -> SdpaTuning {
        self.loop_order = order;
        self
    }

    /// Turns the CPU decode path on or off.
    pub fn with_decode(mut self, on: bool) -> SdpaTuning {
        self.decode = on;
        self
    }

    /// Turns the timed choice of variants on or off (off: the tuned thresholds and the
    /// best instruction set decide).
    pub fn with_choose(mut self, on: bool) -> SdpaTuning {
        self.choose = on;
        self
    }

    /// Sets the AVX-512 packed kernels' broadcast form.
    pub fn with_broadcast(mut self, broadcast: Broadcast) -> SdpaTuning {
        self.broadcast = broadcast;
        self
    }

    /// Turns the AVX-512 BF16 dot products of bf16 inputs on or off (off: bf16 runs on
    /// the f32 FMAs).
    pub fn with_bf16_dot_products(mut self, on: bool) -> SdpaTuning {
        self.bf16_dot_products = on;
        self
    }

    /// Runs the decode path from `keys` keys on (tests take it at any length; 0: the
    /// default).
    pub fn with_decode_min_keys(mut self, keys: usize) -> SdpaTuning {
        self.decode_min_keys = (keys > 0).then_some(keys);
        self
    }

    /// Sets the CUDA kernel's launch configuration.
    pub fn with_cuda(mut self, cfg: SdpaCudaConfig) -> SdpaTuning {
        self.cuda = Some(cfg);
        self
    }
}

/// SDPA block sizes: query rows and keys per block, both above 0. Read from `bq,bk`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SdpaBlocks {
    /// Query rows per block.
    pub q: usize,
    /// Keys per block.
    pub k: usize,
}

impl FromStr for SdpaBlocks {
    type Err = String;

    fn from_str(s: &str) -> Result<SdpaBlocks, String> {
        let bad = || format!("SDPA blocks `{s}`: expected two sizes above 0, as `bq,bk`");
        let (a, b) = s.split_once(',').ok_or_else(bad)?;
        let q: usize = a.trim().parse().map_err(|_| bad())?;
        let k: usize = b.trim().parse().map_err(|_| bad())?;
        if q == 0 || k == 0 {
            return Err(bad());
        }
        Ok(SdpaBlocks { q, k })
    }
}

/// The packed SDPA path's loop orders: whether the query panels (scores) and the value
/// panels (values) are the outer loops. Read from a string holding `q` and/or `v`
/// (`qv`, `q`, `v`, or empty for neither).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SdpaLoopOrder {
    /// Query panels outer in the score product.
    pub q_outer: bool,
    /// Value panels outer in the value product.
    pub v_outer: bool,
}

impl Default for SdpaLoopOrder {
    fn default() -> SdpaLoopOrder {
        SdpaLoopOrder {
            q_outer: true,
            v_outer: false,
        }
    }
}

impl FromStr for SdpaLoopOrder {
    type Err = String;

    fn from_str(s: &str) -> Result<SdpaLoopOrder, String> {
        let s = s.trim();
        if let Some(c) = s.chars().find(|c| !matches!(c, 'q' | 'v')) {
            return Err(format!(
                "SDPA loop order `{s}`: `{c}` is neither `q` nor `v` (expected qv, q, v or empty)"
            ));
        }
        Ok(SdpaLoopOrder {
            q_outer: s.contains('q'),
            v_outer: s.contains('v'),
        })
    }
}

/// The CUDA SDPA kernel's launch configuration. Read from `warps,block_n,m_tiles,q_in_regs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SdpaCudaConfig {
    /// Warps per block, 1 to 8.
    pub warps: u32,
    /// Keys per tile: a multiple of 16 from 16 to 128.
    pub block_n: u32,
    /// Query m-tiles per warp: 1 or 2.
    pub m_tiles: u32,
    /// Keep Q in registers.
    pub q_in_regs: bool,
}

impl FromStr for SdpaCudaConfig {
    type Err = String;

    fn from_str(s: &str) -> Result<SdpaCudaConfig, String> {
        let bad = || {
            format!(
                "SDPA CUDA config `{s}`: expected `warps,block_n,m_tiles,q_in_regs` with warps \
                 1-8, block_n a multiple of 16 in 16-128, m_tiles 1-2, q_in_regs 0 or 1"
            )
        };
        let v: Vec<u32> = s
            .split(',')
            .map(|x| x.trim().parse().map_err(|_| bad()))
            .collect::<Result<_, _>>()?;
        let [warps, block_n, m_tiles, qr] = v[..] else {
            return Err(bad());
        };
        let ok = (1..=8).contains(&warps)
            && block_n.is_multiple_of(16)
            && (16..=128).contains(&block_n)
            && (1..=2).contains(&m_tiles)
            && qr <= 1;
        if !ok {
            return Err(bad());
        }
        Ok(SdpaCudaConfig {
            warps,
            block_n,
            m_tiles,
            q_in_regs: qr == 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_never_raise_the_cpus_level() {
        let best = Isa::best();
        assert_eq!(KernelOptions::default().isa(), best);
        let o = KernelOptions::default().with_max_isa(Isa::Baseline);
        assert_eq!([o.isa(), o.fused_isa(), o.sdpa_isa()], [Isa::Baseline; 3]);
        let o = KernelOptions::default()
            .with_max_isa(Isa::Avx512)
            .with_fused_max_isa(Isa::Baseline)
            .with_sdpa(SdpaTuning::default().with_max_isa(Isa::Avx2Fma));
        assert_eq!(o.isa(), best);
        assert_eq!(o.fused_isa(), Isa::Baseline);
        assert_eq!(o.sdpa_isa(), best.min(Isa::Avx2Fma));
    }

    #[test]
    fn installed_options_are_current_until_the_guard_drops() {
        let set = KernelOptions::default()
            .with_threads(3)
            .with_max_tensor_bytes(64);
        assert_eq!(KernelOptions::current(), KernelOptions::default());
        {
            let _g = set.install();
            assert_eq!(KernelOptions::current(), set);
            assert_eq!(KernelOptions::current().tensor_budget(), 64);
            let inner = KernelOptions::default().with_pack_weights(false);
            {
                let _h = inner.install();
                assert_eq!(KernelOptions::current(), inner);
            }
            assert_eq!(KernelOptions::current(), set);
        }
        assert_eq!(KernelOptions::current(), KernelOptions::default());
        assert_eq!(KernelOptions::default().with_threads(0).threads, None);
    }

    #[test]
    fn tuning_values_parse_and_bad_ones_are_refused() {
        assert_eq!("64, 128".parse(), Ok(SdpaBlocks { q: 64, k: 128 }));
        assert!("64".parse::<SdpaBlocks>().is_err());
        assert!("0,128".parse::<SdpaBlocks>().is_err());
        assert_eq!(
            "v".parse(),
            Ok(SdpaLoopOrder {
                q_outer: false,
                v_outer: true
            })
        );
        assert!("x".parse::<SdpaLoopOrder>().unwrap_err().contains("`x`"));
        let c: SdpaCudaConfig = "4,64,2,1".parse().unwrap();
        assert_eq!(
            (c.warps, c.block_n, c.m_tiles, c.q_in_regs),
            (4, 64, 2, true)
        );
        assert!("4,60,2,1".parse::<SdpaCudaConfig>().is_err());
        assert!("4,64,2".parse::<SdpaCudaConfig>().is_err());
    }
}

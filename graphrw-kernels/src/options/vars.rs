//! The `GRAPHRW_*` variables the `graphrw` command (and `python -m graphrw`) reads from
//! its environment, mapped onto [`KernelOptions`] by [`from_vars`]. The library never
//! reads the environment itself: [`from_vars`] takes the variables from its caller.
//!
//! | Variable | Option | Value |
//! |---|---|---|
//! | `GRAPHRW_ISA` | `KernelOptions::max_isa` | `baseline`, `avx2` or `avx512`: the highest instruction set any kernel uses |
//! | `GRAPHRW_THREADS` | `KernelOptions::threads` | threads for a plan's kernels (default: one per core) |
//! | `GRAPHRW_MAX_TENSOR_BYTES` | `KernelOptions::max_tensor_bytes` | the largest tensor a kernel may allocate, in bytes (default: the machine's memory) |
//! | `GRAPHRW_PRODUCT_KERNEL` | `KernelOptions::product_kernel` | `measure` (default: each product shape times its candidate kernels once), `rule` (packed from 64 rows), or a kernel pinned: `gemm`, `packed-avx512`, `packed-avx512-reg` (AVX-512, broadcasting into a register), `packed-avx2` |
//! | `GRAPHRW_WORKERS_SLEEP` | `KernelOptions::keep_workers_awake` off | a run's workers sleep between kernels instead of polling for work |
//! | `GRAPHRW_NO_PACKED_WEIGHTS=1` | `KernelOptions::pack_weights` off | matmul weights are not packed at their first run |
//! | `GRAPHRW_FUSED_NO_AVX512` | `KernelOptions::fused_max_isa` = avx2 | the generated kernels stop at AVX2 |
//! | `GRAPHRW_FUSED_BASELINE` | `KernelOptions::fused_max_isa` = baseline | the generated kernels run their portable build |
//! | `GRAPHRW_SDPA_NO_AVX512` | `SdpaTuning::max_isa` = avx2 | the fused attention stops at AVX2 |
//! | `GRAPHRW_SDPA_BASELINE` | `SdpaTuning::max_isa` = baseline | the fused attention runs its portable loops |
//! | `GRAPHRW_SDPA_NO_PACK` | `SdpaTuning::pack` off | keys and values are read in place |
//! | `GRAPHRW_SDPA_NO_FUSE` | `SdpaTuning::fuse_softmax` off | the softmax step is always a pass of its own |
//! | `GRAPHRW_SDPA_NO_MICRO` | `SdpaTuning::micro_kernels` off | the in-place path's portable tiles instead of the AVX2 ones |
//! | `GRAPHRW_SDPA_NO_DECODE` | `SdpaTuning::decode` off | the fused attention's general kernel also for a few query rows over many keys |
//! | `GRAPHRW_SDPA_NO_CHOOSE` | `SdpaTuning::choose` off | the fused attention's variant by its tuned thresholds, not timed on each kind of shape's first call |
//! | `GRAPHRW_SDPA_IN_REGISTER` | `SdpaTuning::broadcast` = in register | the fused attention's AVX-512 tiles broadcast each element into a register once (with `GRAPHRW_SDPA_NO_CHOOSE`; the chooser times both forms) |
//! | `GRAPHRW_SDPA_NO_BF16_DOT` | `SdpaTuning::bf16_dot_products` off | the fused attention's AVX-512 path converts bf16 to f32 for its FMAs instead of using BF16 dot products (with `GRAPHRW_SDPA_NO_CHOOSE`; the chooser times both) |
//! | `GRAPHRW_SDPA_BLOCKS` | `SdpaTuning::blocks` | `bq,bk`: query rows and keys per block |
//! | `GRAPHRW_SDPA_ORDER` | `SdpaTuning::loop_order` | `qv`, `q`, `v` or empty: which packed panels are the outer loops |
//! | `GRAPHRW_SDPA_CFG` | `SdpaTuning::cuda` | `warps,block_n,m_tiles,q_in_regs`: the CUDA attention's launch |
//! | `GRAPHRW_NVRTC_LIB` | `CudaOptions::nvrtc_lib` | the NVRTC library file (CUDA builds) |
//!
//! The switches (`GRAPHRW_*_NO_*`, `*_BASELINE`) are on when set to anything but `0`
//! or the empty string; `GRAPHRW_NO_PACKED_WEIGHTS` only when `1`. A value that does
//! not parse is an error naming the variable.

use super::{KernelOptions, ProductChoice, SdpaTuning};
use crate::cpu::{Broadcast, Isa};

/// Every variable [`from_vars`] maps, with what it sets (for `--help`).
pub const VARIABLES: &[(&str, &str)] = &[
    (
        "GRAPHRW_ISA",
        "baseline|avx2|avx512: the highest instruction set kernels use",
    ),
    (
        "GRAPHRW_THREADS",
        "N: threads for a plan's kernels (default: one per core)",
    ),
    (
        "GRAPHRW_MAX_TENSOR_BYTES",
        "N: the largest tensor a kernel may allocate (default: the machine's memory)",
    ),
    (
        "GRAPHRW_PRODUCT_KERNEL",
        "measure, rule, gemm, packed-avx512, packed-avx512-reg or packed-avx2: how products pick their kernel",
    ),
    (
        "GRAPHRW_WORKERS_SLEEP",
        "a run's workers sleep between kernels instead of polling for work",
    ),
    ("GRAPHRW_NO_PACKED_WEIGHTS", "1: do not pack matmul weights"),
    ("GRAPHRW_FUSED_NO_AVX512", "generated kernels stop at AVX2"),
    (
        "GRAPHRW_FUSED_BASELINE",
        "generated kernels run their portable build",
    ),
    ("GRAPHRW_SDPA_NO_AVX512", "fused attention stops at AVX2"),
    (
        "GRAPHRW_SDPA_BASELINE",
        "fused attention runs its portable loops",
    ),
    (
        "GRAPHRW_SDPA_NO_PACK",
        "fused attention reads keys and values in place",
    ),
    (
        "GRAPHRW_SDPA_NO_FUSE",
        "fused attention keeps the softmax step a pass of its own",
    ),
    (
        "GRAPHRW_SDPA_NO_MICRO",
        "fused attention's in-place path without the AVX2 tiles",
    ),
    (
        "GRAPHRW_SDPA_NO_DECODE",
        "fused attention without its decode path (few query rows, many keys)",
    ),
    (
        "GRAPHRW_SDPA_NO_CHOOSE",
        "fused attention's variant by its thresholds, not timed on first calls",
    ),
    (
        "GRAPHRW_SDPA_IN_REGISTER",
        "fused attention's AVX-512 tiles broadcast into a register (with NO_CHOOSE)",
    ),
    (
        "GRAPHRW_SDPA_NO_BF16_DOT",
        "fused attention's AVX-512 path runs bf16 on f32 FMAs (with NO_CHOOSE)",
    ),
    (
        "GRAPHRW_SDPA_BLOCKS",
        "bq,bk: fused attention's query rows and keys per block",
    ),
    (
        "GRAPHRW_SDPA_ORDER",
        "qv|q|v|(empty): the packed attention's outer loops",
    ),
    (
        "GRAPHRW_SDPA_CFG",
        "warps,block_n,m_tiles,q_in_regs: the CUDA attention's launch",
    ),
    (
        "GRAPHRW_NVRTC_LIB",
        "path: the NVRTC library file (CUDA builds)",
    ),
];

/// The kernel options the variables ask for (see the [module docs](self)): `get` gives a
/// variable's value, `None` where unset (the defaults for every unset one). An error
/// names the variable whose value does not parse.
pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<KernelOptions, String> {
    let switch = |name: &str| get(name).is_some_and(|v| !v.is_empty() && v != "0");
    let parsed = |name: &str| -> Option<String> { get(name).map(|v| v.trim().to_string()) };
    let bad = |name: &str, e: String| format!("{name}: {e}");
    let number = |name: &str| -> Result<Option<u64>, String> {
        parsed(name)
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| bad(name, format!("`{v}` is not a whole number")))
            })
            .transpose()
    };

    let mut o = KernelOptions::default();
    if let Some(v) = parsed("GRAPHRW_ISA") {
        o = o.with_max_isa(v.parse::<Isa>().map_err(|e| bad("GRAPHRW_ISA", e))?);
    }
    if let Some(n) = number("GRAPHRW_THREADS")? {
        o = o.with_threads(n as usize);
    }
    if let Some(n) = number("GRAPHRW_MAX_TENSOR_BYTES")? {
        o = o.with_max_tensor_bytes(n);
    }
    if let Some(v) = parsed("GRAPHRW_PRODUCT_KERNEL") {
        o = o.with_product_kernel(
            v.parse::<ProductChoice>()
                .map_err(|e| bad("GRAPHRW_PRODUCT_KERNEL", e))?,
        );
    }
    if switch("GRAPHRW_WORKERS_SLEEP") {
        o = o.with_keep_workers_awake(false);
    }
    if get("GRAPHRW_NO_PACKED_WEIGHTS").is_some_and(|v| v == "1") {
        o = o.with_pack_weights(false);
    }
    if switch("GRAPHRW_FUSED_BASELINE") {
        o = o.with_fused_max_isa(Isa::Baseline);
    } else if switch("GRAPHRW_FUSED_NO_AVX512") {
        o = o.with_fused_max_isa(Isa::Avx2Fma);
    }

    let mut t = SdpaTuning::default();
    if switch("GRAPHRW_SDPA_BASELINE") {
        t = t.with_max_isa(Isa::Baseline);
    } else if switch("GRAPHRW_SDPA_NO_AVX512") {
        t = t.with_max_isa(Isa::Avx2Fma);
    }
    if switch("GRAPHRW_SDPA_NO_PACK") {
        t = t.with_pack(false);
    }
    if switch("GRAPHRW_SDPA_NO_FUSE") {
        t = t.with_fuse_softmax(false);
    }
    if switch("GRAPHRW_SDPA_NO_MICRO") {
        t = t.with_micro_kernels(false);
    }
    if switch("GRAPHRW_SDPA_NO_DECODE") {
        t = t.with_decode(false);
    }
    if switch("GRAPHRW_SDPA_NO_CHOOSE") {
        t = t.with_choose(false);
    }
    if switch("GRAPHRW_SDPA_IN_REGISTER") {
        t = t.with_broadcast(Broadcast::InRegister);
    }
    if switch("GRAPHRW_SDPA_NO_BF16_DOT") {
        t = t.with_bf16_dot_products(false);
    }
    if let Some(v) = parsed("GRAPHRW_SDPA_BLOCKS") {
        t = t.with_blocks(v.parse().map_err(|e| bad("GRAPHRW_SDPA_BLOCKS", e))?);
    }
    if let Some(v) = parsed("GRAPHRW_SDPA_ORDER") {
        t = t.with_loop_order(v.parse().map_err(|e| bad("GRAPHRW_SDPA_ORDER", e))?);
    }
    if let Some(v) = parsed("GRAPHRW_SDPA_CFG") {
        t = t.with_cuda(v.parse().map_err(|e| bad("GRAPHRW_SDPA_CFG", e))?);
    }
    Ok(o.with_sdpa(t))
}

/// A `--help` section listing [`VARIABLES`].
pub fn help_section() -> String {
    let width = VARIABLES.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    let mut s = String::from("Environment (mapped onto the run's kernel options):\n");
    for (name, what) in VARIABLES {
        s.push_str(&format!("  {name:width$}  {what}\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(vars: &[(&str, &str)]) -> Result<KernelOptions, String> {
        from_vars(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn no_variable_gives_the_defaults() {
        assert_eq!(from(&[]), Ok(KernelOptions::default()));
    }

    #[test]
    fn each_variable_sets_its_option() {
        let o = from(&[
            ("GRAPHRW_ISA", "avx2"),
            ("GRAPHRW_THREADS", "3"),
            ("GRAPHRW_MAX_TENSOR_BYTES", "1048576"),
            ("GRAPHRW_NO_PACKED_WEIGHTS", "1"),
            ("GRAPHRW_FUSED_NO_AVX512", "1"),
            ("GRAPHRW_SDPA_BASELINE", "1"),
            ("GRAPHRW_SDPA_NO_PACK", "1"),
            ("GRAPHRW_SDPA_NO_FUSE", "yes"),
            ("GRAPHRW_SDPA_NO_MICRO", "1"),
            ("GRAPHRW_SDPA_BLOCKS", "48,96"),
            ("GRAPHRW_SDPA_ORDER", "v"),
            ("GRAPHRW_SDPA_CFG", "4,64,2,0"),
            ("GRAPHRW_PRODUCT_KERNEL", "packed-avx2"),
            ("GRAPHRW_SDPA_NO_CHOOSE", "1"),
            ("GRAPHRW_SDPA_IN_REGISTER", "1"),
            ("GRAPHRW_SDPA_NO_BF16_DOT", "1"),
        ])
        .unwrap();
        assert_eq!(o.max_isa, Some(Isa::Avx2Fma));
        assert_eq!(
            o.product_kernel,
            ProductChoice::Pin(crate::options::ProductKernel::Packed(Isa::Avx2Fma))
        );
        assert_eq!(o.threads, Some(3));
        assert_eq!(o.max_tensor_bytes, Some(1 << 20));
        assert!(!o.pack_weights);
        assert_eq!(o.fused_max_isa, Some(Isa::Avx2Fma));
        let t = o.sdpa;
        assert_eq!(t.max_isa, Some(Isa::Baseline));
        assert!(!t.pack && !t.fuse_softmax && !t.micro_kernels && !t.choose);
        assert_eq!(t.broadcast, Broadcast::InRegister);
        assert!(!t.bf16_dot_products);
        assert_eq!(t.blocks.map(|b| (b.q, b.k)), Some((48, 96)));
        assert!(!t.loop_order.q_outer && t.loop_order.v_outer);
        assert_eq!(t.cuda.map(|c| (c.warps, c.block_n)), Some((4, 64)));
    }

    #[test]
    fn switches_set_to_0_or_empty_stay_off() {
        let o = from(&[
            ("GRAPHRW_SDPA_NO_PACK", "0"),
            ("GRAPHRW_FUSED_BASELINE", ""),
            ("GRAPHRW_NO_PACKED_WEIGHTS", "yes"),
        ])
        .unwrap();
        assert_eq!(o, KernelOptions::default());
        let baseline_wins = from(&[
            ("GRAPHRW_FUSED_BASELINE", "1"),
            ("GRAPHRW_FUSED_NO_AVX512", "1"),
        ])
        .unwrap();
        assert_eq!(baseline_wins.fused_max_isa, Some(Isa::Baseline));
    }

    #[test]
    fn bad_values_are_errors_naming_the_variable() {
        for (name, value) in [
            ("GRAPHRW_ISA", "sse9"),
            ("GRAPHRW_THREADS", "many"),
            ("GRAPHRW_MAX_TENSOR_BYTES", "-1"),
            ("GRAPHRW_SDPA_BLOCKS", "96"),
            ("GRAPHRW_SDPA_ORDER", "kq"),
            ("GRAPHRW_SDPA_CFG", "9,64,2,0"),
            ("GRAPHRW_PRODUCT_KERNEL", "fastest"),
        ] {
            let e = from(&[(name, value)]).unwrap_err();
            assert!(e.starts_with(&format!("{name}: ")), "{e}");
        }
    }

    #[test]
    fn the_help_lists_every_variable() {
        let help = help_section();
        for (name, _) in VARIABLES {
            assert!(help.contains(name), "{name} missing from\n{help}");
        }
    }
}

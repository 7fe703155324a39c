//! The CPU's instruction-set features, detected once per process, and the [`Isa`]
//! levels the kernels are compiled for.
//!
//! Every kernel that picks a SIMD build asks here ([`CpuFeatures::get`], [`Isa::best`])
//! or through [`isa_dispatch!`](crate::isa_dispatch), never `is_x86_feature_detected!`
//! itself. Which level a call may use is the smaller of the best this CPU has and the
//! cap of the [`KernelOptions`](crate::KernelOptions) it runs with
//! ([`KernelOptions::isa`](crate::KernelOptions::isa)), so the AVX2 paths can be tested
//! on an AVX-512 machine; `GRAPHRW_ISA` caps the detected features for the whole
//! process ([`CpuFeatures::get`]), so that a test run sees an AVX2-only CPU.

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

/// The x86-64 features the kernels use, as detected on this CPU (all false on other
/// targets).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CpuFeatures {
    /// AVX2 (256-bit integer and float vectors).
    pub avx2: bool,
    /// FMA3 fused multiply-add.
    pub fma: bool,
    /// AVX-512 Foundation.
    pub avx512f: bool,
    /// AVX-512 vector-length extensions (512-bit instructions on 128/256-bit vectors).
    pub avx512vl: bool,
    /// AVX-512 byte and word instructions.
    pub avx512bw: bool,
    /// AVX-512 doubleword and quadword instructions.
    pub avx512dq: bool,
    /// AVX-512 BF16 dot products.
    pub avx512bf16: bool,
}

impl CpuFeatures {
    /// No feature: what a non-x86 target, or the portable build, may assume.
    pub const NONE: CpuFeatures = CpuFeatures {
        avx2: false,
        fma: false,
        avx512f: false,
        avx512vl: false,
        avx512bw: false,
        avx512dq: false,
        avx512bf16: false,
    };

    /// This CPU's features, detected on the first call and cached for the process, less
    /// those above the level `GRAPHRW_ISA` names (`baseline`, `avx2` or `avx512`; an
    /// unreadable value caps nothing, and the CLI refuses it): with `GRAPHRW_ISA=avx2`
    /// every kernel, test and chooser in the process sees a CPU without AVX-512, as on
    /// an AVX2-only machine (graphrw's own kernels: the `gemm` crate detects its own).
    pub fn get() -> CpuFeatures {
        static CAPPED: OnceLock<CpuFeatures> = OnceLock::new();
        *CAPPED.get_or_init(|| {
            let cap = std::env::var("GRAPHRW_ISA")
                .ok()
                .and_then(|v| v.trim().parse().ok());
            CpuFeatures::detected().capped(cap)
        })
    }

    /// This CPU's features as detected, whatever `GRAPHRW_ISA` says.
    pub fn detected() -> CpuFeatures {
        static DETECTED: OnceLock<CpuFeatures> = OnceLock::new();
        *DETECTED.get_or_init(CpuFeatures::detect)
    }

    /// These features less those above `cap` (all of them where `None`).
    pub fn capped(self, cap: Option<Isa>) -> CpuFeatures {
        let mut f = self;
        if cap.is_some_and(|c| c < Isa::Avx512) {
            (f.avx512f, f.avx512vl, f.avx512bw, f.avx512dq, f.avx512bf16) =
                (false, false, false, false, false);
        }
        if cap.is_some_and(|c| c < Isa::Avx2Fma) {
            (f.avx2, f.fma) = (false, false);
        }
        f
    }

    #[cfg(target_arch = "x86_64")]
    fn detect() -> CpuFeatures {
        use std::arch::is_x86_feature_detected as has;
        CpuFeatures {
            avx2: has!("avx2"),
            fma: has!("fma"),
            avx512f: has!("avx512f"),
            avx512vl: has!("avx512vl"),
            avx512bw: has!("avx512bw"),
            avx512dq: has!("avx512dq"),
            avx512bf16: has!("avx512bf16"),
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn detect() -> CpuFeatures {
        CpuFeatures::NONE
    }

    /// Whether these features run code compiled for `isa`.
    pub fn supports(self, isa: Isa) -> bool {
        match isa {
            Isa::Baseline => true,
            Isa::Avx2Fma => self.avx2 && self.fma,
            Isa::Avx512 => {
                self.supports(Isa::Avx2Fma)
                    && self.avx512f
                    && self.avx512vl
                    && self.avx512bw
                    && self.avx512dq
            }
        }
    }

    /// The highest [`Isa`] these features run.
    pub fn best_isa(self) -> Isa {
        [Isa::Avx512, Isa::Avx2Fma]
            .into_iter()
            .find(|&isa| self.supports(isa))
            .unwrap_or(Isa::Baseline)
    }
}

impl fmt::Display for CpuFeatures {
    /// The vector extensions that decide the kernels, in words: `AVX2+FMA, no AVX-512`,
    /// `AVX2+FMA, AVX-512 (F VL BW DQ BF16)` (the AVX-512 parts present), or
    /// `no AVX2+FMA` (the portable loops only).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.avx2 && self.fma {
            "AVX2+FMA"
        } else {
            "no AVX2+FMA"
        })?;
        let avx512: Vec<&str> = [
            (self.avx512f, "F"),
            (self.avx512vl, "VL"),
            (self.avx512bw, "BW"),
            (self.avx512dq, "DQ"),
            (self.avx512bf16, "BF16"),
        ]
        .into_iter()
        .filter_map(|(has, name)| has.then_some(name))
        .collect();
        if avx512.is_empty() {
            f.write_str(", no AVX-512")
        } else {
            write!(f, ", AVX-512 ({})", avx512.join(" "))
        }
    }
}

/// The CPU's name as it reports it (the CPUID brand string, for example `AMD EPYC` or
/// `Intel(R) Xeon(R) Platinum 8480+`), where the CPU has one; benchmarks print it beside
/// their figures.
pub fn cpu_brand() -> Option<String> {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid;
        // The brand string takes extended leaves 0x8000_0002..=0x8000_0004; every x86-64
        // CPU reports the highest extended leaf in leaf 0x8000_0000.
        if __cpuid(0x8000_0000).eax < 0x8000_0004 {
            return None;
        }
        let bytes: Vec<u8> = (0x8000_0002u32..=0x8000_0004)
            .flat_map(|leaf| {
                let r = __cpuid(leaf);
                [r.eax, r.ebx, r.ecx, r.edx]
            })
            .flat_map(u32::to_le_bytes)
            .collect();
        // Padded with NULs or spaces at either end: the words, one space apart.
        let words: Vec<String> = String::from_utf8_lossy(&bytes)
            .split(|c: char| c == '\0' || c.is_whitespace())
            .filter(|w| !w.is_empty())
            .map(str::to_string)
            .collect();
        (!words.is_empty()).then(|| words.join(" "))
    }
    #[cfg(not(target_arch = "x86_64"))]
    None
}

/// The machine a time was taken on, as one line: the CPU's name ([`cpu_brand`], else the
/// architecture), its vector extensions, and `isa`, the level the kernels run at (for a
/// plan, [`KernelOptions::isa`](crate::KernelOptions::isa)):
/// `cpu: AMD EPYC; AVX2+FMA, no AVX-512; kernels: avx2`. `graphrw run` and the benches
/// print it beside their figures.
pub fn machine_line(isa: Isa) -> String {
    format!(
        "cpu: {}; {}; kernels: {isa}",
        cpu_brand().unwrap_or_else(|| std::env::consts::ARCH.to_string()),
        CpuFeatures::get()
    )
}

/// The instruction-set levels the kernels are compiled for, lowest first (so `a <= b`
/// means code for `a` runs wherever code for `b` does).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// The build target's own (baseline x86-64: SSE2, 4 f32 lanes; or a non-x86 target):
    /// the portable loops.
    Baseline,
    /// x86-64 with AVX2 and FMA (8 f32 lanes, fused multiply-adds).
    Avx2Fma,
    /// x86-64 with AVX-512 F, VL, BW and DQ besides AVX2 and FMA (16 f32 lanes).
    Avx512,
}

impl Isa {
    /// Every level, lowest first.
    pub const ALL: [Isa; 3] = [Isa::Baseline, Isa::Avx2Fma, Isa::Avx512];

    /// Whether this CPU runs code built for `self`.
    pub fn is_available(self) -> bool {
        CpuFeatures::get().supports(self)
    }

    /// The highest level this CPU runs (detected once).
    pub fn best() -> Isa {
        CpuFeatures::get().best_isa()
    }

    /// The level's name as [`FromStr`] reads it: `baseline`, `avx2` or `avx512`.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Baseline => "baseline",
            Isa::Avx2Fma => "avx2",
            Isa::Avx512 => "avx512",
        }
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Isa {
    type Err = String;

    /// `baseline` (also `portable`), `avx2` (also `avx2fma`) or `avx512`, any case.
    fn from_str(s: &str) -> Result<Isa, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "baseline" | "portable" => Ok(Isa::Baseline),
            "avx2" | "avx2fma" | "avx2+fma" => Ok(Isa::Avx2Fma),
            "avx512" => Ok(Isa::Avx512),
            other => Err(format!(
                "unknown instruction set `{other}`: expected baseline, avx2 or avx512"
            )),
        }
    }
}

/// Runs the first arm whose level the given [`Isa`](crate::cpu::Isa) reaches, else the
/// `_` arm (the portable code):
///
/// ```ignore
/// isa_dispatch!(opts.isa(), {
///     Avx512 => unsafe { kernel_avx512(x) },  // SAFETY: ...
///     Avx2Fma => unsafe { kernel_avx2(x) },   // SAFETY: ...
///     _ => kernel_portable(x),
/// })
/// ```
///
/// The SIMD arms are compiled on x86-64 only, so they may name `#[target_feature]`
/// functions and `std::arch::x86_64` items; other targets compile the `_` arm alone.
/// A level only runs where the CPU has it when the `Isa` came from
/// [`Isa::best`](crate::cpu::Isa::best) or [`KernelOptions::isa`](crate::KernelOptions::isa)
/// (never higher than the CPU's).
#[macro_export]
macro_rules! isa_dispatch {
    ($isa:expr, { $($level:ident => $body:expr,)+ _ => $fallback:expr $(,)? }) => {{
        let isa: $crate::cpu::Isa = $isa;
        let _ = isa;
        #[allow(unused_labels)]
        let out = 'dispatch: {
            $(
                #[cfg(target_arch = "x86_64")]
                if isa >= $crate::cpu::Isa::$level {
                    break 'dispatch ($body);
                }
            )+
            $fallback
        };
        out
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cap leaves exactly the features of the levels at or below it.
    #[test]
    fn a_cap_removes_the_levels_above_it() {
        let all = CpuFeatures {
            avx2: true,
            fma: true,
            avx512f: true,
            avx512vl: true,
            avx512bw: true,
            avx512dq: true,
            avx512bf16: true,
        };
        assert_eq!(all.capped(None), all);
        assert_eq!(all.capped(Some(Isa::Avx512)), all);
        assert_eq!(all.capped(Some(Isa::Avx2Fma)).best_isa(), Isa::Avx2Fma);
        assert!(!all.capped(Some(Isa::Avx2Fma)).avx512bf16);
        assert_eq!(all.capped(Some(Isa::Baseline)), CpuFeatures::NONE);
    }

    #[test]
    fn levels_are_ordered_and_nested() {
        assert!(Isa::Baseline < Isa::Avx2Fma && Isa::Avx2Fma < Isa::Avx512);
        let avx2 = CpuFeatures {
            avx2: true,
            fma: true,
            ..CpuFeatures::NONE
        };
        assert_eq!(avx2.best_isa(), Isa::Avx2Fma);
        assert!(avx2.supports(Isa::Baseline) && !avx2.supports(Isa::Avx512));
        let no_fma = CpuFeatures {
            avx2: true,
            ..CpuFeatures::NONE
        };
        assert_eq!(no_fma.best_isa(), Isa::Baseline);
        let skx = CpuFeatures {
            avx512f: true,
            avx512vl: true,
            avx512bw: true,
            avx512dq: true,
            ..avx2
        };
        assert_eq!(skx.best_isa(), Isa::Avx512);
        assert_eq!(CpuFeatures::NONE.best_isa(), Isa::Baseline);
        assert!(Isa::best().is_available());
    }

    #[test]
    fn features_read_as_words() {
        let avx2 = CpuFeatures {
            avx2: true,
            fma: true,
            ..CpuFeatures::NONE
        };
        assert_eq!(avx2.to_string(), "AVX2+FMA, no AVX-512");
        assert_eq!(CpuFeatures::NONE.to_string(), "no AVX2+FMA, no AVX-512");
        let spr = CpuFeatures {
            avx512f: true,
            avx512vl: true,
            avx512bw: true,
            avx512dq: true,
            avx512bf16: true,
            ..avx2
        };
        assert_eq!(spr.to_string(), "AVX2+FMA, AVX-512 (F VL BW DQ BF16)");
        // The brand string, where there is one, is printable text without padding.
        if let Some(name) = cpu_brand() {
            assert!(!name.is_empty() && name.trim() == name, "{name:?}");
            assert!(!name.contains('\0') && !name.contains("  "), "{name:?}");
        }
        let line = machine_line(Isa::Baseline);
        assert!(
            line.starts_with("cpu: ") && line.ends_with("; kernels: baseline"),
            "{line}"
        );
    }

    #[test]
    fn names_round_trip_and_bad_names_are_refused() {
        for isa in Isa::ALL {
            assert_eq!(isa.name().parse::<Isa>(), Ok(isa));
        }
        assert_eq!(" AVX2FMA ".parse::<Isa>(), Ok(Isa::Avx2Fma));
        let e = "sse9".parse::<Isa>().unwrap_err();
        assert!(e.contains("`sse9`") && e.contains("avx512"), "{e}");
    }

    #[test]
    fn dispatch_takes_the_highest_arm_the_level_reaches() {
        let pick = |isa: Isa| {
            crate::isa_dispatch!(isa, {
                Avx512 => "avx512",
                Avx2Fma => "avx2",
                _ => "portable",
            })
        };
        assert_eq!(pick(Isa::Baseline), "portable");
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(pick(Isa::Avx2Fma), "avx2");
            assert_eq!(pick(Isa::Avx512), "avx512");
        }
    }
}

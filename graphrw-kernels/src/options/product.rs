//! The names of the kernels that can run a product by a constant weight, and how the
//! options pick one of them ([`ProductChoice`]); the chooser that measures them is
//! [`crate::cpu::choice`].

use std::fmt;
use std::str::FromStr;

use crate::cpu::{Broadcast, Isa};

/// A kernel for an f32 product by a constant weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProductKernel {
    /// The `gemm` crate (packs the weight again on every call).
    Gemm,
    /// The packed-weight GEMM on one instruction set's kernel (on AVX-512, each left
    /// operand element broadcast inside its FMAs, [`Broadcast::InFma`]).
    Packed(Isa),
    /// The packed-weight AVX-512 kernel broadcasting each left-operand element into a
    /// register once per depth step ([`Broadcast::InRegister`]), on the same packing
    /// as `Packed(Isa::Avx512)`.
    PackedAvx512InRegister,
}

impl ProductKernel {
    /// The instruction set whose packing the kernel runs on (`None` for the `gemm`
    /// crate).
    pub fn packed_isa(self) -> Option<Isa> {
        match self {
            ProductKernel::Gemm => None,
            ProductKernel::Packed(isa) => Some(isa),
            ProductKernel::PackedAvx512InRegister => Some(Isa::Avx512),
        }
    }

    /// How the kernel broadcasts the left operand
    /// ([`Epilogue::broadcast`](crate::cpu::Epilogue::broadcast)).
    pub fn broadcast(self) -> Broadcast {
        match self {
            ProductKernel::PackedAvx512InRegister => Broadcast::InRegister,
            _ => Broadcast::InFma,
        }
    }

    /// The kernel that runs on a weight packed for `isa` with `broadcast`.
    pub fn packed(isa: Isa, broadcast: Broadcast) -> ProductKernel {
        match (isa, broadcast) {
            (Isa::Avx512, Broadcast::InRegister) => ProductKernel::PackedAvx512InRegister,
            (isa, _) => ProductKernel::Packed(isa),
        }
    }
}

impl fmt::Display for ProductKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProductKernel::Gemm => f.write_str("gemm"),
            ProductKernel::Packed(Isa::Avx512) => f.write_str("packed-avx512"),
            ProductKernel::Packed(Isa::Avx2Fma) => f.write_str("packed-avx2"),
            ProductKernel::Packed(Isa::Baseline) => f.write_str("packed-baseline"),
            ProductKernel::PackedAvx512InRegister => f.write_str("packed-avx512-reg"),
        }
    }
}

impl FromStr for ProductKernel {
    type Err = String;

    /// `gemm`, `packed-avx512`, `packed-avx512-reg` or `packed-avx2`, any case.
    fn from_str(s: &str) -> Result<ProductKernel, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "gemm" => Ok(ProductKernel::Gemm),
            "packed-avx512" => Ok(ProductKernel::Packed(Isa::Avx512)),
            "packed-avx512-reg" => Ok(ProductKernel::PackedAvx512InRegister),
            "packed-avx2" => Ok(ProductKernel::Packed(Isa::Avx2Fma)),
            other => Err(format!(
                "unknown product kernel `{other}`: expected gemm, packed-avx512, \
                 packed-avx512-reg or packed-avx2"
            )),
        }
    }
}

/// How products by a constant weight pick their kernel
/// ([`KernelOptions::product_kernel`](super::KernelOptions::product_kernel)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ProductChoice {
    /// Time the candidates on each shape's first product and keep the fastest.
    #[default]
    Measure,
    /// The fixed rule: the packed GEMM from
    /// [`PackedWeight::MIN_ROWS`](crate::cpu::PackedWeight::MIN_ROWS) rows (where it
    /// packs the weight), else the `gemm` crate.
    Rule,
    /// Always this kernel where it runs (a packed kernel the CPU or the options do not
    /// allow falls back to the rule).
    Pin(ProductKernel),
}

impl FromStr for ProductChoice {
    type Err = String;

    /// `measure`, `rule`, or a kernel's name ([`ProductKernel::from_str`]).
    fn from_str(s: &str) -> Result<ProductChoice, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "measure" => Ok(ProductChoice::Measure),
            "rule" => Ok(ProductChoice::Rule),
            other => other
                .parse::<ProductKernel>()
                .map(ProductChoice::Pin)
                .map_err(|e| format!("{e}, measure or rule")),
        }
    }
}

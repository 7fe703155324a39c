//! [`SdpaKernel`]: the implementations of the fused attention, and their forms.

use crate::cpu::Broadcast;

/// The implementation of the fused kernel that runs a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SdpaKernel {
    /// Portable loops (no AVX2+FMA, or the SDPA instruction set capped at
    /// [`Isa::Baseline`](crate::cpu::Isa::Baseline)).
    Plain,
    /// Operands read in place, AVX2+FMA micro-tiles (f64: the loops compiled for
    /// AVX2+FMA); [`SdpaTuning::pack`](crate::SdpaTuning::pack) off forces it.
    Avx2,
    /// Packed operands, AVX2+FMA `6 x 16` micro-tiles (f32, f16, bf16);
    /// An SDPA instruction set capped at [`Isa::Avx2Fma`](crate::cpu::Isa::Avx2Fma) forces it where the CPU has
    /// AVX-512.
    PackedAvx2,
    /// Packed operands, AVX-512 `8 x 48` f32 micro-tiles (f32, f16; bf16 converted to
    /// f32 where [`SdpaTuning::bf16_dot_products`](crate::SdpaTuning::bf16_dot_products)
    /// is off), on CPUs with AVX-512F, BW and BF16.
    PackedAvx512,
    /// Packed operands, both products on AVX-512 BF16 dot products (bf16).
    PackedAvx512Bf16,
    /// [`SdpaKernel::PackedAvx512`] with its depth loops broadcasting each key element
    /// and probability into a register once ([`Broadcast::InRegister`]; the same
    /// results), for cores with two 512-bit FMA ports.
    PackedAvx512InRegister,
    /// [`SdpaKernel::PackedAvx512Bf16`] broadcasting into a register once.
    PackedAvx512Bf16InRegister,
    /// The decode path (`decode/`): at most [`DECODE_MAX_QUERIES`](super::DECODE_MAX_QUERIES) query rows over
    /// at least [`DECODE_MIN_KEYS`](super::DECODE_MIN_KEYS) keys ([`DECODE_MIN_KEYS_FEW`](super::DECODE_MIN_KEYS_FEW) for at most
    /// [`DECODE_FEW_QUERIES`](super::DECODE_FEW_QUERIES) rows), f32, f16, bf16; work split over key blocks, each
    /// key/value row read once per key/value head; AVX-512F or AVX2+FMA tiles as the
    /// SDPA instruction set allows. [`SdpaTuning::decode`](crate::SdpaTuning::decode) off
    /// turns it off.
    Decode,
}

impl SdpaKernel {
    /// Whether this is one of the AVX-512 packed kernels.
    pub fn is_packed_avx512(self) -> bool {
        matches!(
            self,
            SdpaKernel::PackedAvx512
                | SdpaKernel::PackedAvx512Bf16
                | SdpaKernel::PackedAvx512InRegister
                | SdpaKernel::PackedAvx512Bf16InRegister
        )
    }

    /// How this kernel's depth loops broadcast ([`Broadcast::InFma`] for all but the
    /// register forms).
    pub fn broadcast(self) -> Broadcast {
        match self {
            SdpaKernel::PackedAvx512InRegister | SdpaKernel::PackedAvx512Bf16InRegister => {
                Broadcast::InRegister
            }
            _ => Broadcast::InFma,
        }
    }

    /// This kernel as the tuning `t` asks: bf16 on the f32 micro-tiles without its dot
    /// products, and in its broadcast form (kernels with one form stay as they are).
    pub(super) fn tuned(self, t: &crate::SdpaTuning) -> SdpaKernel {
        let k = match self {
            SdpaKernel::PackedAvx512Bf16 if !t.bf16_dot_products => SdpaKernel::PackedAvx512,
            k => k,
        };
        match (k, t.broadcast) {
            (SdpaKernel::PackedAvx512, Broadcast::InRegister) => SdpaKernel::PackedAvx512InRegister,
            (SdpaKernel::PackedAvx512Bf16, Broadcast::InRegister) => {
                SdpaKernel::PackedAvx512Bf16InRegister
            }
            (k, _) => k,
        }
    }
}

//! Dtype-tagged operands and their loads into compute values.

use std::any::TypeId;

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

use super::math;
use crate::{DType, Element, KernelError, Real, Tensor};

/// The float type a generated kernel computes in: `f32` (for f32, f16 and bf16 storage)
/// or `f64` (for f64 storage).
pub trait Compute: Real + Copy + Send + Sync + PartialOrd {
    /// From an `f64` literal or scalar attribute.
    fn lit(v: f64) -> Self;
    /// `1 / (1 + e^-x)` (for f32 through the vectorisable [`math::exp`]). `FMA`: the
    /// caller is compiled with the `fma` target feature, so the f32 polynomials may use
    /// fused multiply-adds ([`math::exp_with`]); the same holds for the other `*_vec`.
    #[inline(always)]
    fn sigmoid<const FMA: bool>(self) -> Self {
        Self::ONE / (Self::ONE + (-self).exp_vec::<FMA>())
    }
    /// `e^x`: for f32 the vectorisable [`math::exp`], for f64 the precise library `exp`.
    fn exp_vec<const FMA: bool>(self) -> Self;
    /// `erf(x)`: for f32 the vectorisable [`math::erf`], for f64 the precise `libm` one.
    fn erf_vec<const FMA: bool>(self) -> Self;
    /// `tanh(x)`: for f32 the vectorisable [`math::tanh`], for f64 the precise library one.
    fn tanh_vec<const FMA: bool>(self) -> Self;
    /// `max(x, 0)`; NaN stays NaN.
    #[inline]
    fn relu(self) -> Self {
        if self < Self::ZERO {
            Self::ZERO
        } else {
            self
        }
    }
    /// Maximum propagating NaN (as the reference `maximum` does).
    #[inline]
    fn max_nan(self, o: Self) -> Self {
        if self.is_nan() || o.is_nan() {
            Self::NAN
        } else if o > self {
            o
        } else {
            self
        }
    }
    /// Minimum propagating NaN.
    #[inline]
    fn min_nan(self, o: Self) -> Self {
        if self.is_nan() || o.is_nan() {
            Self::NAN
        } else if o < self {
            o
        } else {
            self
        }
    }
    /// `1` for true, `0` for false.
    #[inline]
    fn from_bool(b: bool) -> Self {
        if b {
            Self::ONE
        } else {
            Self::ZERO
        }
    }
    /// True when non-zero (NaN counts as true, as a cast to bool does).
    #[inline]
    fn truthy(self) -> bool {
        self != Self::ZERO
    }
    /// The elements of `src[off..off + len]` when they are already of this type.
    fn borrow<'a>(src: &Src<'a>, off: usize, len: usize) -> Option<&'a [Self]>;
    /// Converts `src` elements `off, off + stride, ..` into `dst`.
    fn convert(src: &Src<'_>, off: usize, stride: usize, dst: &mut [Self]);
    /// Stores `vals` into `out` (of the output's storage type `E`).
    fn store<E: Element>(vals: &[Self], out: &mut [E]);
}

/// A kernel operand: a contiguous tensor's elements, tagged by dtype.
#[derive(Clone, Copy, Debug)]
pub enum Src<'a> {
    /// f32 elements.
    F32(&'a [f32]),
    /// f64 elements.
    F64(&'a [f64]),
    /// f16 elements.
    F16(&'a [f16]),
    /// bf16 elements.
    BF16(&'a [bf16]),
    /// bool elements (read as 0 and 1).
    Bool(&'a [bool]),
    /// i64 elements (read as floats).
    I64(&'a [i64]),
}

impl<'a> Src<'a> {
    /// The elements of `t`; `op` names the kernel in the error for a dtype it cannot read.
    pub fn of(t: &'a Tensor, op: &'static str) -> Result<Src<'a>, KernelError> {
        Ok(match t.dtype() {
            DType::F32 => Src::F32(t.as_slice()?),
            DType::F64 => Src::F64(t.as_slice()?),
            DType::F16 => Src::F16(t.as_slice()?),
            DType::BF16 => Src::BF16(t.as_slice()?),
            DType::Bool => Src::Bool(t.as_slice()?),
            DType::I64 => Src::I64(t.as_slice()?),
            dtype => {
                return Err(KernelError::UnsupportedDType {
                    op,
                    dtype,
                    expected: "f32, f64, f16, bf16, bool or i64 operands",
                })
            }
        })
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Src::F32(s) => s.len(),
            Src::F64(s) => s.len(),
            Src::F16(s) => s.len(),
            Src::BF16(s) => s.len(),
            Src::Bool(s) => s.len(),
            Src::I64(s) => s.len(),
        }
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Asks the CPU to start loading elements `off .. off + len` (clamped to the slice)
    /// into its caches: a hint, with no effect on results (nothing on non-x86 targets).
    /// The drivers call it for the next row or tile, so that memory is read while the
    /// current one computes (the hardware prefetcher stops at 4 KiB page boundaries).
    #[inline]
    pub fn prefetch(&self, off: usize, len: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            let (ptr, size, n) = match *self {
                Src::F32(s) => (s.as_ptr().cast::<u8>(), 4, s.len()),
                Src::F64(s) => (s.as_ptr().cast::<u8>(), 8, s.len()),
                Src::F16(s) => (s.as_ptr().cast::<u8>(), 2, s.len()),
                Src::BF16(s) => (s.as_ptr().cast::<u8>(), 2, s.len()),
                Src::Bool(s) => (s.as_ptr().cast::<u8>(), 1, s.len()),
                Src::I64(s) => (s.as_ptr().cast::<u8>(), 8, s.len()),
            };
            let start = off.min(n) * size;
            let end = off.saturating_add(len).min(n) * size;
            let mut b = start;
            while b < end {
                let p = ptr.wrapping_add(b).cast::<i8>();
                // SAFETY: `_mm_prefetch` needs SSE, part of every x86-64 target; it is a
                // hint that never faults nor reads into the program, and `p` points
                // inside the slice anyway (`b < end <= n * size`).
                unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p) };
                b += 64;
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (off, len);
    }
}

macro_rules! convert_from {
    ($src:expr, $off:expr, $stride:expr, $dst:expr, $f:expr) => {{
        let (s, off, stride, dst) = ($src, $off, $stride, $dst);
        if stride == 0 {
            let v = $f(s[off]);
            dst.fill(v);
        } else {
            let s = &s[off..off + dst.len()];
            for (d, &x) in dst.iter_mut().zip(s) {
                *d = $f(x);
            }
        }
    }};
}

impl Compute for f32 {
    #[inline]
    fn lit(v: f64) -> f32 {
        v as f32
    }
    #[inline(always)]
    fn sigmoid<const FMA: bool>(self) -> f32 {
        math::sigmoid_with::<FMA>(self)
    }
    #[inline(always)]
    fn exp_vec<const FMA: bool>(self) -> f32 {
        math::exp_with::<FMA>(self)
    }
    #[inline(always)]
    fn erf_vec<const FMA: bool>(self) -> f32 {
        math::erf_with::<FMA>(self)
    }
    #[inline(always)]
    fn tanh_vec<const FMA: bool>(self) -> f32 {
        math::tanh_with::<FMA>(self)
    }
    #[inline]
    fn borrow<'a>(src: &Src<'a>, off: usize, len: usize) -> Option<&'a [f32]> {
        match src {
            Src::F32(s) => s.get(off..off + len),
            _ => None,
        }
    }
    // Inlined so that it is compiled with the caller's target features (the generated
    // kernels' AVX2 build).
    #[inline]
    fn convert(src: &Src<'_>, off: usize, stride: usize, dst: &mut [f32]) {
        match *src {
            Src::F32(s) => convert_from!(s, off, stride, dst, |x: f32| x),
            Src::F64(s) => convert_from!(s, off, stride, dst, |x: f64| x as f32),
            // half's slice conversion: F16C eight at a time where the CPU has it.
            Src::F16(s) if stride == 1 => s[off..off + dst.len()].convert_to_f32_slice(dst),
            Src::F16(s) => convert_from!(s, off, stride, dst, |x: f16| x.to_f32()),
            Src::BF16(s) => convert_from!(s, off, stride, dst, |x: bf16| x.to_f32()),
            Src::Bool(s) => convert_from!(s, off, stride, dst, |x: bool| x as u8 as f32),
            Src::I64(s) => convert_from!(s, off, stride, dst, |x: i64| x as f32),
        }
    }
    #[inline]
    fn store<E: Element>(vals: &[f32], out: &mut [E]) {
        let n = vals.len().min(out.len());
        let (vals, out) = (&vals[..n], &mut out[..n]);
        if let Some(out) = as_f16_mut(out) {
            // half's slice conversion: F16C eight at a time where the CPU has it (the
            // per-element conversion checks for it on every call).
            out.convert_from_f32_slice(vals);
            return;
        }
        for (o, &v) in out.iter_mut().zip(vals) {
            *o = E::from_f32(v);
        }
    }
}

/// `out` as f16 elements when `E` is `f16`.
#[inline]
fn as_f16_mut<E: Element>(out: &mut [E]) -> Option<&mut [f16]> {
    same_type_mut::<E, f16>(out)
}

/// `out` as a slice of `T` when `E` is `T` (the same type; else `None`): a kernel whose
/// compute type is the output's storage type writes the output in place.
#[inline]
pub(crate) fn same_type_mut<E: 'static, T: 'static>(out: &mut [E]) -> Option<&mut [T]> {
    if TypeId::of::<E>() != TypeId::of::<T>() {
        return None;
    }
    let (ptr, len) = (out.as_mut_ptr(), out.len());
    // SAFETY: `E` is `T` (same `TypeId`), so `out` is a valid, exclusively borrowed
    // `[T]` of `len` elements; the result reborrows it for the same lifetime.
    Some(unsafe { std::slice::from_raw_parts_mut(ptr.cast::<T>(), len) })
}

impl Compute for f64 {
    #[inline]
    fn lit(v: f64) -> f64 {
        v
    }
    #[inline]
    fn exp_vec<const FMA: bool>(self) -> f64 {
        self.exp()
    }
    #[inline]
    fn erf_vec<const FMA: bool>(self) -> f64 {
        libm::erf(self)
    }
    #[inline]
    fn tanh_vec<const FMA: bool>(self) -> f64 {
        self.tanh()
    }
    #[inline]
    fn borrow<'a>(src: &Src<'a>, off: usize, len: usize) -> Option<&'a [f64]> {
        match src {
            Src::F64(s) => s.get(off..off + len),
            _ => None,
        }
    }
    fn convert(src: &Src<'_>, off: usize, stride: usize, dst: &mut [f64]) {
        match *src {
            Src::F32(s) => convert_from!(s, off, stride, dst, |x: f32| x as f64),
            Src::F64(s) => convert_from!(s, off, stride, dst, |x: f64| x),
            Src::F16(s) => convert_from!(s, off, stride, dst, |x: f16| x.to_f64()),
            Src::BF16(s) => convert_from!(s, off, stride, dst, |x: bf16| x.to_f64()),
            Src::Bool(s) => convert_from!(s, off, stride, dst, |x: bool| x as u8 as f64),
            Src::I64(s) => convert_from!(s, off, stride, dst, |x: i64| x as f64),
        }
    }
    #[inline]
    fn store<E: Element>(vals: &[f64], out: &mut [E]) {
        for (o, &v) in out.iter_mut().zip(vals) {
            *o = E::from_f64(v);
        }
    }
}

/// `v` rounded as a cast to `dtype` rounds it (a `cast` inside a fused expression):
/// to f16/bf16/f32 precision, truncated toward zero for integers, 0/1 for bool.
#[inline]
pub fn round_as<F: Compute>(v: F, dtype: DType) -> F {
    let x = v.to_f64();
    F::lit(match dtype {
        DType::F16 => f16::from_f64(x).to_f64(),
        DType::BF16 => bf16::from_f64(x).to_f64(),
        DType::F32 => x as f32 as f64,
        DType::Bool => (x != 0.0) as u8 as f64,
        DType::F64 => x,
        _ => {
            if x.is_nan() {
                0.0
            } else {
                x.trunc()
            }
        }
    })
}

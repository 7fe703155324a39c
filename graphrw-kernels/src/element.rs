//! Rust types that can be tensor elements, and the float types kernels compute in.

use std::fmt::Debug;

use half::{bf16, f16};

use crate::macros::dispatch;
use crate::{DType, Storage};

/// A floating-point type kernels compute in: `f32` (for f32, f16 and bf16 storage)
/// or `f64` (for f64 storage and integer-to-float work).
pub trait Real:
    Element
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Neg<Output = Self>
    + std::ops::AddAssign
    + std::ops::MulAssign
    + std::iter::Sum
{
    /// 0.
    const ZERO: Self;
    /// 1.
    const ONE: Self;
    /// Negative infinity.
    const NEG_INFINITY: Self;
    /// Not a number.
    const NAN: Self;
    /// `e^x`.
    fn exp(self) -> Self;
    /// Natural logarithm.
    fn ln(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// Sine.
    fn sin(self) -> Self;
    /// Cosine.
    fn cos(self) -> Self;
    /// Hyperbolic tangent.
    fn tanh(self) -> Self;
    /// Absolute value.
    fn abs(self) -> Self;
    /// `self^e`.
    fn powf(self, e: Self) -> Self;
    /// True for NaN.
    fn is_nan(self) -> bool;
    /// The error function, precise to the last bits of the type (from `libm`).
    fn erf(self) -> Self;
}

macro_rules! impl_real {
    ($t:ident, $erf:path) => {
        impl Real for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const NEG_INFINITY: Self = $t::NEG_INFINITY;
            const NAN: Self = $t::NAN;
            #[inline]
            fn exp(self) -> Self {
                $t::exp(self)
            }
            #[inline]
            fn ln(self) -> Self {
                $t::ln(self)
            }
            #[inline]
            fn sqrt(self) -> Self {
                $t::sqrt(self)
            }
            #[inline]
            fn sin(self) -> Self {
                $t::sin(self)
            }
            #[inline]
            fn cos(self) -> Self {
                $t::cos(self)
            }
            #[inline]
            fn tanh(self) -> Self {
                $t::tanh(self)
            }
            #[inline]
            fn abs(self) -> Self {
                $t::abs(self)
            }
            #[inline]
            fn powf(self, e: Self) -> Self {
                $t::powf(self, e)
            }
            #[inline]
            fn is_nan(self) -> bool {
                $t::is_nan(self)
            }
            #[inline]
            fn erf(self) -> Self {
                $erf(self)
            }
        }
    };
}

impl_real!(f32, libm::erff);
impl_real!(f64, libm::erf);

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
    impl Sealed for i64 {}
    impl Sealed for i32 {}
    impl Sealed for bool {}
    impl Sealed for u8 {}
    impl Sealed for i8 {}
    impl Sealed for i16 {}
    impl Sealed for u16 {}
    impl Sealed for u32 {}
    impl Sealed for u64 {}
}

/// A Rust type that can be stored in a [`Tensor`](crate::Tensor): `f32`, `f64`,
/// `half::f16`, `half::bf16`, `i64`, `i32`, `bool`, `u8`, `i8`, `i16`, `u16`, `u32`
/// and `u64`.
///
/// Conversions follow ONNX's `Cast` (as onnxruntime runs it on x86-64): float to
/// integer truncates toward zero; integer to a narrower integer wraps (keeps the low
/// bits); anything to `bool` is `!= 0`. Where ONNX leaves the result undefined (NaN, or
/// a float out of the integer's range) graphrw is deterministic: NaN becomes 0; into
/// `i64` and `i32` an out-of-range float saturates; into the narrower integers (`i16`,
/// `i8`, `u32`, `u16`, `u8`) the float is first truncated into `i64` (saturating) and
/// then wrapped, so `-1.0` becomes 255 as a `u8` and `256.0` becomes 0, as numpy's
/// `astype` and onnxruntime give on x86-64; into `u64` a negative float goes through
/// `i64` and wraps (`-1.0` is `u64::MAX`), a non-negative one saturates.
pub trait Element:
    sealed::Sealed + Copy + Default + Debug + PartialEq + PartialOrd + Send + Sync + 'static
{
    /// The dtype tag of this type.
    const DTYPE: DType;
    /// The float type kernels compute in for this element type (f32 for f32/f16/bf16,
    /// f64 otherwise).
    type Acc: Real;

    /// Converts to `f64`.
    fn to_f64(self) -> f64;
    /// Converts from `f64` (truncating toward zero for integers).
    fn from_f64(v: f64) -> Self;
    /// Converts to `f32`.
    fn to_f32(self) -> f32;
    /// Converts from `f32` (truncating toward zero for integers).
    fn from_f32(v: f32) -> Self;
    /// Converts to `i64` (truncating toward zero for floats, NaN to 0).
    fn to_i64(self) -> i64;
    /// Converts from `i64` (wrapping for the narrower integers, `!= 0` for `bool`).
    fn from_i64(v: i64) -> Self;
    /// Converts to the compute type.
    fn to_acc(self) -> Self::Acc;
    /// Converts from the compute type (rounding to nearest for f16/bf16).
    fn from_acc(v: Self::Acc) -> Self;
    /// True when the value is a floating-point NaN.
    fn is_nan_value(self) -> bool;

    /// The elements of `storage` when it holds this type.
    fn storage_slice(storage: &Storage) -> Option<&[Self]>;
    /// Wraps a vector in the matching [`Storage`] variant.
    fn into_storage(data: Vec<Self>) -> Storage;
    /// Reads one little-endian element from `bytes` (exactly `DTYPE.size_in_bytes()` long).
    fn read_le(bytes: &[u8]) -> Self;
    /// Appends the little-endian bytes of this element.
    fn write_le(self, out: &mut Vec<u8>);
}

macro_rules! impl_float_element {
    ($t:ty, $dt:ident, $acc:ty, $n:expr,
     to_f64: $to64:expr, from_f64: $from64:expr, to_f32: $to32:expr, from_f32: $from32:expr,
     to_acc: $toacc:expr, from_acc: $fromacc:expr,
     from_bits: $frombits:expr, to_bits: $tobits:expr) => {
        impl Element for $t {
            const DTYPE: DType = DType::$dt;
            type Acc = $acc;
            #[inline]
            fn to_f64(self) -> f64 {
                ($to64)(self)
            }
            #[inline]
            fn from_f64(v: f64) -> Self {
                ($from64)(v)
            }
            #[inline]
            fn to_f32(self) -> f32 {
                ($to32)(self)
            }
            #[inline]
            fn from_f32(v: f32) -> Self {
                ($from32)(v)
            }
            #[inline]
            fn to_i64(self) -> i64 {
                self.to_f64() as i64
            }
            #[inline]
            fn from_i64(v: i64) -> Self {
                Self::from_f64(v as f64)
            }
            #[inline]
            fn to_acc(self) -> $acc {
                ($toacc)(self)
            }
            #[inline]
            fn from_acc(v: $acc) -> Self {
                ($fromacc)(v)
            }
            #[inline]
            fn is_nan_value(self) -> bool {
                self.is_nan()
            }
            fn storage_slice(storage: &Storage) -> Option<&[Self]> {
                match storage {
                    Storage::$dt(v) => Some(v),
                    Storage::Mapped(m) => m.typed::<$t>(),
                    Storage::External(e) => e.typed::<$t>(),
                    _ => None,
                }
            }
            fn into_storage(data: Vec<Self>) -> Storage {
                Storage::$dt(data)
            }
            fn read_le(bytes: &[u8]) -> Self {
                let mut b = [0u8; $n];
                b.copy_from_slice(&bytes[..$n]);
                ($frombits)(b)
            }
            fn write_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&($tobits)(self));
            }
        }
    };
}

impl_float_element!(f32, F32, f32, 4,
    to_f64: |x: f32| x as f64, from_f64: |v: f64| v as f32,
    to_f32: |x: f32| x, from_f32: |v: f32| v,
    to_acc: |x: f32| x, from_acc: |v: f32| v,
    from_bits: f32::from_le_bytes, to_bits: |x: f32| x.to_le_bytes());
impl_float_element!(f64, F64, f64, 8,
    to_f64: |x: f64| x, from_f64: |v: f64| v,
    to_f32: |x: f64| x as f32, from_f32: |v: f32| v as f64,
    to_acc: |x: f64| x, from_acc: |v: f64| v,
    from_bits: f64::from_le_bytes, to_bits: |x: f64| x.to_le_bytes());
impl_float_element!(f16, F16, f32, 2,
    to_f64: |x: f16| x.to_f64(), from_f64: f16::from_f64,
    to_f32: |x: f16| x.to_f32(), from_f32: f16::from_f32,
    to_acc: |x: f16| x.to_f32(), from_acc: f16::from_f32,
    from_bits: f16::from_le_bytes, to_bits: |x: f16| x.to_le_bytes());
impl_float_element!(bf16, BF16, f32, 2,
    to_f64: |x: bf16| x.to_f64(), from_f64: bf16::from_f64,
    to_f32: |x: bf16| x.to_f32(), from_f32: bf16::from_f32,
    to_acc: |x: bf16| x.to_f32(), from_acc: bf16::from_f32,
    from_bits: bf16::from_le_bytes, to_bits: |x: bf16| x.to_le_bytes());

macro_rules! impl_int_element {
    ($t:ty, $dt:ident, $n:expr, from_float: $fromf:expr) => {
        impl Element for $t {
            const DTYPE: DType = DType::$dt;
            type Acc = f64;
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline]
            fn from_f64(v: f64) -> Self {
                ($fromf)(v)
            }
            #[inline]
            fn to_f32(self) -> f32 {
                self as f32
            }
            #[inline]
            fn from_f32(v: f32) -> Self {
                ($fromf)(f64::from(v))
            }
            #[inline]
            fn to_i64(self) -> i64 {
                self as i64
            }
            #[inline]
            fn from_i64(v: i64) -> Self {
                v as $t
            }
            #[inline]
            fn to_acc(self) -> f64 {
                self as f64
            }
            #[inline]
            fn from_acc(v: f64) -> Self {
                ($fromf)(v)
            }
            #[inline]
            fn is_nan_value(self) -> bool {
                false
            }
            fn storage_slice(storage: &Storage) -> Option<&[Self]> {
                match storage {
                    Storage::$dt(v) => Some(v),
                    Storage::Mapped(m) => m.typed::<$t>(),
                    Storage::External(e) => e.typed::<$t>(),
                    _ => None,
                }
            }
            fn into_storage(data: Vec<Self>) -> Storage {
                Storage::$dt(data)
            }
            fn read_le(bytes: &[u8]) -> Self {
                let mut b = [0u8; $n];
                b.copy_from_slice(&bytes[..$n]);
                <$t>::from_le_bytes(b)
            }
            fn write_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    };
}

impl_int_element!(i64, I64, 8, from_float: |v: f64| v as i64);
impl_int_element!(i32, I32, 4, from_float: |v: f64| v as i32);
impl_int_element!(i16, I16, 2, from_float: |v: f64| (v as i64) as i16);
impl_int_element!(i8, I8, 1, from_float: |v: f64| (v as i64) as i8);
impl_int_element!(u32, U32, 4, from_float: |v: f64| (v as i64) as u32);
impl_int_element!(u16, U16, 2, from_float: |v: f64| (v as i64) as u16);
impl_int_element!(u8, U8, 1, from_float: |v: f64| (v as i64) as u8);
impl_int_element!(u64, U64, 8, from_float: |v: f64| if v < 0.0 {
    (v as i64) as u64
} else {
    v as u64
});

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    type Acc = f32;
    #[inline]
    fn to_f64(self) -> f64 {
        self as u8 as f64
    }
    #[inline]
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
    #[inline]
    fn to_f32(self) -> f32 {
        self as u8 as f32
    }
    #[inline]
    fn from_f32(v: f32) -> Self {
        v != 0.0
    }
    #[inline]
    fn to_i64(self) -> i64 {
        self as i64
    }
    #[inline]
    fn from_i64(v: i64) -> Self {
        v != 0
    }
    #[inline]
    fn to_acc(self) -> f32 {
        self as u8 as f32
    }
    #[inline]
    fn from_acc(v: f32) -> Self {
        v != 0.0
    }
    #[inline]
    fn is_nan_value(self) -> bool {
        false
    }
    fn storage_slice(storage: &Storage) -> Option<&[Self]> {
        match storage {
            Storage::Bool(v) => Some(v),
            _ => None,
        }
    }
    fn into_storage(data: Vec<Self>) -> Storage {
        Storage::Bool(data)
    }
    fn read_le(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
    fn write_le(self, out: &mut Vec<u8>) {
        out.push(self as u8);
    }
}

// Equality of storages compares their elements as the element type of their dtype.
impl PartialEq for Storage {
    /// Same dtype and equal elements (float equality: NaN differs from itself), whether
    /// the elements are in memory or mapped.
    fn eq(&self, other: &Storage) -> bool {
        if self.dtype() != other.dtype() {
            return false;
        }
        dispatch!(self.dtype(), |T| T::storage_slice(self)
            == T::storage_slice(other))
    }
}

/// The integer element types (`i64`, `i32`, `i16`, `i8`, `u64`, `u32`, `u16`, `u8`),
/// with the wrapping arithmetic PyTorch and onnxruntime use for them.
pub trait IntElement: Element + Ord {
    /// Zero.
    const ZERO: Self;
    /// Wrapping addition.
    fn wadd(self, o: Self) -> Self;
    /// Wrapping subtraction.
    fn wsub(self, o: Self) -> Self;
    /// Wrapping multiplication.
    fn wmul(self, o: Self) -> Self;
    /// Division truncating toward zero (wrapping on `MIN / -1`); `o` must not be zero.
    fn wdiv(self, o: Self) -> Self;
    /// Wrapping negation.
    fn wneg(self) -> Self;
    /// Wrapping absolute value (the value itself for unsigned types).
    fn wabs(self) -> Self;
}

macro_rules! impl_int {
    ($t:ty, abs: $abs:expr) => {
        impl IntElement for $t {
            const ZERO: Self = 0;
            #[inline]
            fn wadd(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            #[inline]
            fn wsub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            #[inline]
            fn wmul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            #[inline]
            fn wdiv(self, o: Self) -> Self {
                if o == 0 {
                    0
                } else {
                    self.wrapping_div(o)
                }
            }
            #[inline]
            fn wneg(self) -> Self {
                self.wrapping_neg()
            }
            #[inline]
            fn wabs(self) -> Self {
                ($abs)(self)
            }
        }
    };
}

impl_int!(i64, abs: i64::wrapping_abs);
impl_int!(i32, abs: i32::wrapping_abs);
impl_int!(i16, abs: i16::wrapping_abs);
impl_int!(i8, abs: i8::wrapping_abs);
impl_int!(u64, abs: |v: u64| v);
impl_int!(u32, abs: |v: u32| v);
impl_int!(u16, abs: |v: u16| v);
impl_int!(u8, abs: |v: u8| v);

//! Dtype dispatch: run one generic body with a type alias bound to the element type.

/// `dispatch!(dtype, |T| body)`: evaluates `body` with `T` aliased to the Rust type of
/// `dtype`, for every dtype.
macro_rules! dispatch {
    ($dt:expr, |$T:ident| $body:expr) => {
        match $dt {
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::DType::F16 => {
                type $T = half::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $T = half::bf16;
                $body
            }
            $crate::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::DType::Bool => {
                type $T = bool;
                $body
            }
            $crate::DType::U8 => {
                type $T = u8;
                $body
            }
            $crate::DType::I8 => {
                type $T = i8;
                $body
            }
            $crate::DType::I16 => {
                type $T = i16;
                $body
            }
            $crate::DType::U16 => {
                type $T = u16;
                $body
            }
            $crate::DType::U32 => {
                type $T = u32;
                $body
            }
            $crate::DType::U64 => {
                type $T = u64;
                $body
            }
        }
    };
}

/// `dispatch_float!(dtype, "op", |T| body)`: like `dispatch!` for the float dtypes; any
/// other dtype evaluates to `Err(KernelError::UnsupportedDType)` naming `op`.
macro_rules! dispatch_float {
    ($dt:expr, $op:expr, |$T:ident| $body:expr) => {
        match $dt {
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::DType::F16 => {
                type $T = half::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $T = half::bf16;
                $body
            }
            other => Err($crate::KernelError::UnsupportedDType {
                op: $op,
                dtype: other,
                expected: "a float dtype (f32, f64, f16, bf16)",
            }),
        }
    };
}

/// `dispatch_int!(dtype, "op", |T| body)`: like `dispatch_float!` for the integer
/// dtypes (every `T` is an [`IntElement`](crate::IntElement)); the float dtypes and
/// `bool` evaluate to `Err(KernelError::UnsupportedDType)` naming `op`.
macro_rules! dispatch_int {
    ($dt:expr, $op:expr, |$T:ident| $body:expr) => {
        match $dt {
            $crate::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::DType::I16 => {
                type $T = i16;
                $body
            }
            $crate::DType::I8 => {
                type $T = i8;
                $body
            }
            $crate::DType::U64 => {
                type $T = u64;
                $body
            }
            $crate::DType::U32 => {
                type $T = u32;
                $body
            }
            $crate::DType::U16 => {
                type $T = u16;
                $body
            }
            $crate::DType::U8 => {
                type $T = u8;
                $body
            }
            other => Err($crate::KernelError::UnsupportedDType {
                op: $op,
                dtype: other,
                expected: "an integer dtype",
            }),
        }
    };
}

pub(crate) use dispatch;
pub(crate) use dispatch_float;
pub(crate) use dispatch_int;

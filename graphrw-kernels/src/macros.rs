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

pub(crate) use dispatch;
pub(crate) use dispatch_float;

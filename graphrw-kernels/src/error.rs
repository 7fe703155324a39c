//! The error type of every tensor constructor and kernel.

use crate::DType;

/// Why a kernel or tensor constructor refused its input.
///
/// Every variant names the kernel (`op`) and the offending shapes, dtypes or values,
/// so a message reads on its own: `matmul: inner dimensions differ: [2, 3] @ [4, 5]`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KernelError {
    /// Shapes that do not fit together (the message says how).
    #[error("{op}: {msg}")]
    Shape {
        /// The kernel.
        op: &'static str,
        /// What is wrong, with the shapes involved.
        msg: String,
    },
    /// Two shapes that cannot be broadcast together.
    #[error("{op}: shapes {lhs:?} and {rhs:?} cannot be broadcast together")]
    Broadcast {
        /// The kernel.
        op: &'static str,
        /// First shape.
        lhs: Vec<usize>,
        /// Second shape.
        rhs: Vec<usize>,
    },
    /// A data length that does not match the element count of a shape.
    #[error("{op}: shape {shape:?} holds {expected} elements but {got} were given")]
    NumelMismatch {
        /// The constructor or kernel.
        op: &'static str,
        /// The requested shape.
        shape: Vec<usize>,
        /// Elements the shape holds.
        expected: usize,
        /// Elements (or bytes, for raw constructors) supplied.
        got: usize,
    },
    /// Operands whose dtypes must agree but do not.
    #[error("{op}: dtype mismatch: {lhs} vs {rhs}")]
    DTypeMismatch {
        /// The kernel.
        op: &'static str,
        /// First dtype (or the expected one).
        lhs: DType,
        /// Second dtype (or the one found).
        rhs: DType,
    },
    /// A dtype the kernel does not accept.
    #[error("{op}: unsupported dtype {dtype} (expected {expected})")]
    UnsupportedDType {
        /// The kernel.
        op: &'static str,
        /// The dtype given.
        dtype: DType,
        /// What the kernel accepts, in words.
        expected: &'static str,
    },
    /// A dimension outside `-rank..rank`.
    #[error("{op}: dim {dim} is out of range for a tensor of rank {rank}")]
    DimOutOfRange {
        /// The kernel.
        op: &'static str,
        /// The dim given.
        dim: i64,
        /// The rank of the tensor.
        rank: usize,
    },
    /// An index outside the size of the dimension it indexes.
    #[error("{op}: index {index} is out of range for a dimension of size {size}")]
    IndexOutOfRange {
        /// The kernel.
        op: &'static str,
        /// The index given.
        index: i64,
        /// The size of the indexed dimension.
        size: usize,
    },
    /// An integer division (or remainder) by zero.
    #[error("{op}: integer division by zero")]
    DivisionByZero {
        /// The kernel.
        op: &'static str,
    },
    /// A bad scalar argument (negative size, zero step, probability outside [0, 1], ...).
    #[error("{op}: {msg}")]
    InvalidArgument {
        /// The kernel.
        op: &'static str,
        /// What is wrong.
        msg: String,
    },
    /// A legal request this crate does not implement (for instance training-mode dropout).
    #[error("{op}: {msg}")]
    Unsupported {
        /// The kernel.
        op: &'static str,
        /// What is not supported.
        msg: String,
    },
}

impl KernelError {
    /// Shorthand for [`KernelError::Shape`].
    pub(crate) fn shape(op: &'static str, msg: impl Into<String>) -> Self {
        KernelError::Shape {
            op,
            msg: msg.into(),
        }
    }

    /// Shorthand for [`KernelError::InvalidArgument`].
    pub(crate) fn invalid(op: &'static str, msg: impl Into<String>) -> Self {
        KernelError::InvalidArgument {
            op,
            msg: msg.into(),
        }
    }
}

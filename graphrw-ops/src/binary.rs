//! The binary elementwise ops: the one list, and [`BinaryOp`] made from it.
//!
//! Each row is `/// doc` then `Variant "op" "name"`: `op` is the built-in op (a row of
//! [`BUILTIN_OPS`](crate::BUILTIN_OPS)), `name` the name errors use. The CPU and CUDA
//! kernels, the tile executor's lanes and `fused_kernel!` all use this one enum.

/// Defines [`BinaryOp`] from the rows below.
macro_rules! binary_ops {
    ($($(#[doc = $doc:literal])* $v:ident $op:literal $name:literal,)*) => {
        /// A binary elementwise op (broadcasting): one row of the list of binary ops.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum BinaryOp {
            $($(#[doc = $doc])* $v,)*
        }

        impl BinaryOp {
            /// Every binary op, in the list's order.
            pub const ALL: &'static [BinaryOp] = &[$(BinaryOp::$v),*];

            /// The op's name as used in error messages (`add`, `maximum`, `logical_and`).
            pub const fn name(self) -> &'static str {
                match self {
                    $(BinaryOp::$v => $name,)*
                }
            }

            /// The built-in op it computes (`add`, `maximum`, `and`).
            pub const fn op(self) -> &'static str {
                match self {
                    $(BinaryOp::$v => $op,)*
                }
            }
        }
    };
}

binary_ops! {
    /// `a + b`.
    Add "add" "add",
    /// `a - b`.
    Sub "sub" "sub",
    /// `a * b`.
    Mul "mul" "mul",
    /// `a / b`; integer division truncates toward zero.
    Div "div" "div",
    /// `a ^ b`; the result has the dtype of `a`.
    Pow "pow" "pow",
    /// Elementwise maximum (NaN propagates).
    Maximum "maximum" "maximum",
    /// Elementwise minimum (NaN propagates).
    Minimum "minimum" "minimum",
    /// Logical and (bool operands).
    And "and" "logical_and",
    /// Logical or (bool operands).
    Or "or" "logical_or",
    /// `a == b` (bool result).
    Eq "eq" "eq",
    /// `a != b` (bool result).
    Ne "ne" "ne",
    /// `a < b` (bool result).
    Lt "lt" "lt",
    /// `a <= b` (bool result).
    Le "le" "le",
    /// `a > b` (bool result).
    Gt "gt" "gt",
    /// `a >= b` (bool result).
    Ge "ge" "ge",
}

impl BinaryOp {
    /// The binary op of built-in op `op`, if it is one.
    pub fn of_op(op: &str) -> Option<BinaryOp> {
        BinaryOp::ALL.iter().copied().find(|b| b.op() == op)
    }

    /// True for the comparisons (`eq` .. `ge`), whose result is bool.
    pub const fn is_compare(self) -> bool {
        matches!(
            self,
            BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
        )
    }

    /// True for the logical ops (`and`, `or`), whose operands are bool.
    pub const fn is_logical(self) -> bool {
        matches!(self, BinaryOp::And | BinaryOp::Or)
    }
}

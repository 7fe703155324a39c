//! The op table of graphrw, as data, with no dependencies.
//!
//! - [`BUILTIN_OPS`] ([`vocab`]): every built-in op with its operands, attributes,
//!   outputs, class and the names of its inference and decomposition functions.
//!   `graphrw` expands its `OpDef` statics and its `Op` enum from it (through
//!   `graphrw-macros`' `__builtin_op_table!`), and `pattern!` checks op names, operand
//!   counts and attribute kinds against it at compile time.
//! - [`UnaryOp`] and [`BinaryOp`]: the elementwise ops as enums, the one list each that
//!   the CPU and CUDA kernels, the tile executor and `fused_kernel!` share. Each names the
//!   table row it computes ([`UnaryOp::op`], [`BinaryOp::op`]); a test checks that every
//!   such name is a row of the table.
//!
//! Users do not depend on this crate directly: `graphrw` re-exports what they need.

#![warn(missing_docs)]

mod attr_values;
mod binary;
mod signature;
mod unary;
pub mod vocab;

pub use attr_values::GeluApproximation;
pub use binary::BinaryOp;
pub use signature::ParamKind;
pub use unary::UnaryOp;
pub use vocab::{find, OpSpec, BUILTIN_OPS};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unary_and_binary_op_is_a_row_of_the_table() {
        for u in UnaryOp::ALL {
            let spec = find(u.op()).unwrap_or_else(|| panic!("{u:?}: no op `{}`", u.op()));
            assert_eq!(spec.class, vocab::Class::Elementwise, "{u:?}");
            assert_eq!(spec.operands.len(), 1, "{u:?}");
        }
        for b in BinaryOp::ALL {
            let spec = find(b.op()).unwrap_or_else(|| panic!("{b:?}: no op `{}`", b.op()));
            assert_eq!(spec.class, vocab::Class::Elementwise, "{b:?}");
            assert_eq!(spec.operands.len(), 2, "{b:?}");
        }
    }

    #[test]
    fn op_names_are_unique() {
        let mut names: Vec<&str> = BUILTIN_OPS.iter().map(|op| op.name).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n);
    }
}

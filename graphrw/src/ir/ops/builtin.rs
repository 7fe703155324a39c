//! The built-in ops, one `static` [`OpDef`](crate::ops::OpDef) each, generated from
//! the op table in `graphrw-ops` (`vocab.rs`).

graphrw_macros::__builtin_op_table!(defs);

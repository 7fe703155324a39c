//! # The graphrw guide
//!
//! A tutorial in nine chapters, in the manner of egg's: each chapter is prose with
//! examples, and every example is a doctest, compiled and run by `cargo test` (so what
//! you read here works with the version you read it in). The module holds no code; it
//! exists only in the documentation and the doctests.
//!
//! 1. [Your first rule](_01_first_rule): build a graph, write a rule, rewrite, check the
//!    numbers.
//! 2. [Why didn't my pattern match?](_02_explain): compile errors at your token, and
//!    `explain` at run time.
//! 3. [Optional parts, constraints and priorities](_03_optional_constraints_priorities).
//! 4. [Your own op and executor](_04_own_op_and_executor): an `OpDef`, a kernel, a
//!    checker, and the planner's fallback to a decomposition.
//! 5. [Your own fused kernel](_05_fused_kernel): `fused_kernel!` from one definition to a
//!    rule, a CPU kernel, a CUDA source and a derivative.
//! 6. [ONNX in and out, and the CLI](_06_onnx_and_cli).
//! 7. [Using graphrw from your crate](_07_your_crate): which profile, and what debug
//!    builds cost.
//! 8. [Is my rule right, and why didn't my model fuse?](_08_is_my_rule_right): the
//!    coverage report of a whole model, and rules of yours that took a built-in
//!    fusion's block.
//! 9. [Rules that check themselves](_09_rules_that_check_themselves): the differential
//!    test `rule_set!` emits for every rule.
//!
//! Every chapter uses only graphrw's public API; the examples need nothing beside
//! `graphrw` (and `graphrw-kernels`' tensors, re-exported as [`crate::kernels`]).

pub mod _01_first_rule;
pub mod _02_explain;
pub mod _03_optional_constraints_priorities;
pub mod _04_own_op_and_executor;
pub mod _05_fused_kernel;
pub mod _06_onnx_and_cli;
pub mod _07_your_crate;
pub mod _08_is_my_rule_right;
pub mod _09_rules_that_check_themselves;

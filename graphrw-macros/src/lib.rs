//! Procedural macros of graphrw.
//!
//! Users reach these through `graphrw` (which re-exports them). The macros read the
//! built-in op vocabulary from `graphrw-ops` (the table, and the unary and binary op
//! lists), the one table that the compile-time pattern checks, `graphrw`'s op
//! declarations and its `Op` enum are all made from.

#![warn(missing_docs)]

mod fused_kernel;
mod optable;
mod pattern;

use graphrw_ops::vocab;

use proc_macro::TokenStream;

/// Expands the built-in op table into `graphrw` (internal; `graphrw::ops` re-exports
/// what it makes). The argument selects what to emit: `defs` (the `OpDef` statics and
/// the `BUILTIN` list), `builder` (the `Builder` methods) or `var` (the `Var` methods).
#[doc(hidden)]
#[proc_macro]
pub fn __builtin_op_table(input: TokenStream) -> TokenStream {
    optable::expand(input.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Compiles pattern functions into static matcher trees: `pattern! { fn name(x: Tensor, ..)
/// -> Tensor where .. { x.op(..) } }` emits a module `name` with `PATTERN`, `Match` and
/// `OUTPUTS`. The language, with examples, is documented in `graphrw::pattern`.
#[proc_macro]
pub fn pattern(input: TokenStream) -> TokenStream {
    pattern::expand_pattern(input.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Compiles a replacement function checked against its pattern:
/// `replacement! { fn name(x: Tensor, ..) -> Tensor for pattern_name { x.op(..)? } }`
/// emits `fn name(&Builder, &Bindings) -> Result<Vec<Value>, GraphError>`; see
/// `graphrw::pattern`.
#[proc_macro]
pub fn replacement(input: TokenStream) -> TokenStream {
    pattern::expand_replacement(input.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Compiles a checked set of rules: `rule_set! { pub static NAME; rule r(x: Tensor) ->
/// Tensor { pattern } => { replacement } .. }` emits one module per rule (with `RULE`)
/// and the `RuleSet` static; shadowed and equal-priority overlapping rules are errors.
/// A rule's module is private unless the rule is written `pub rule` (or `pub(crate)
/// rule`). See `graphrw::pattern`.
#[proc_macro]
pub fn rule_set(input: TokenStream) -> TokenStream {
    pattern::expand_rule_set(input.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Defines a fused kernel from one elementwise expression (with optional last-dimension
/// reductions), in the pattern syntax: `fused_kernel! { fn name(x: Tensor, eps: f64) ->
/// Tensor { .. } }` emits a module `name` with the op (`OP`, `like` its decomposition),
/// the rules that fuse the decomposed form (`RULES`), the CPU kernel (`cpu`), its CUDA
/// source (`CUDA_SOURCE`), with `#[grad]` its vjp kernels (`VJP`), and `KERNEL` tying
/// them together. See `graphrw::generated`.
#[proc_macro]
pub fn fused_kernel(input: TokenStream) -> TokenStream {
    fused_kernel::expand(input.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

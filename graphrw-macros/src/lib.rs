//! Procedural macros of graphrw.
//!
//! Users reach these through `graphrw` (which re-exports them); the crate also holds
//! the built-in op vocabulary as data ([`vocab`]), the one table that both the
//! compile-time pattern checks and `graphrw`'s op declarations are made from.

mod optable;
mod vocab;

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

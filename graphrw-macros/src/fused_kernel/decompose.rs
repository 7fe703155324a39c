//! The decomposition of a fused op into built-in ops: the expression DAG as `Builder`
//! calls. Used for the forward op (its `like`) and for each vjp op.
//!
//! Kernel semantics differ from graph semantics in two places, which a vjp DAG has
//! and a forward body does not: a reduction of a value constant along the row (a
//! literal, or an earlier reduction) sums the row's copies of it, and a node over
//! literals only must still be a tensor of the operands' dtype. With `row_of` (the
//! operand that has the output's full shape) both are built explicitly.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use super::cpu::row_constant;
use super::ir::{Dag, Id, Node, Red};
use super::walk;

fn operand_tokens(dag: &Dag, id: Id) -> TokenStream {
    match dag.nodes[id] {
        Node::Lit(b) => {
            let x = f64::from_bits(b);
            quote!(#x)
        }
        Node::Scalar(k) => {
            let s = format_ident!("s{}", k);
            quote!(#s)
        }
        _ => {
            let v = format_ident!("v{}", id);
            quote!(#v)
        }
    }
}

/// The op's decomposition: the expression rooted at `root` built from built-in ops,
/// over `nt` tensor operands and the float attributes `snames`. `row_of`: see the
/// module doc (`None` for a forward body).
pub fn decompose_fn(
    dag: &Dag,
    root: Id,
    nt: usize,
    snames: &[String],
    op: &str,
    row_of: Option<usize>,
) -> TokenStream {
    let rowc = row_constant(dag);
    let mut st = Vec::new();
    let mut need_n = false;
    let mut need_dt = false;
    for id in walk::topo(dag, root) {
        let v = format_ident!("v{}", id);
        let operands = walk::operands(&dag.nodes[id]);
        // A node over literals and scalars only: its first operand becomes a tensor of
        // the operands' dtype (so that the node is a tensor of that dtype too).
        let all_scalar = !operands.is_empty() && operands.iter().all(|&o| dag.is_scalar_like(o));
        let o = |i: Id| {
            if row_of.is_some() && all_scalar && i == operands[0] {
                let t = operand_tokens(dag, i);
                quote!(__b.scalar(#t, __dt).value())
            } else {
                operand_tokens(dag, i)
            }
        };
        if row_of.is_some() && all_scalar {
            need_dt = true;
        }
        let call = match dag.nodes[id] {
            Node::Input(k) => quote!(__x[#k]),
            Node::Scalar(_) | Node::Lit(_) => continue,
            Node::Un(u, a) => {
                let m = format_ident!("{}", u.op());
                let a = o(a);
                quote!(__b.#m(#a)?)
            }
            Node::Bin(b, x, y) => {
                let m = format_ident!("{}", b.op());
                let (x, y) = (o(x), o(y));
                quote!(__b.#m(#x, #y)?)
            }
            Node::Where(c, x, y) => {
                let (c, x, y) = (o(c), o(x), o(y));
                quote!(__b.where_(#c, #x, #y)?)
            }
            Node::Cast(a, dt) => {
                let a = o(a);
                let d = format_ident!("{}", dt.variant());
                quote!(__b.cast(#a, graphrw::DType::#d)?)
            }
            Node::Reduce(r, a) if row_of.is_some() && rowc[a] => {
                // The row holds `n` copies of a row constant.
                let t = operand_tokens(dag, a);
                match r {
                    Red::Sum => {
                        need_n = true;
                        quote!(__b.mul(__n, #t)?)
                    }
                    Red::Mean | Red::Amax if dag.is_scalar_like(a) => {
                        need_dt = true;
                        quote!(__b.scalar(#t, __dt).value())
                    }
                    Red::Mean | Red::Amax => t,
                }
            }
            Node::Reduce(r, a) => {
                // `_with`: the builder method that takes every attribute.
                let m = format_ident!("{}_with", r.name());
                let a = o(a);
                quote!(__b.#m(#a, &[-1], true)?)
            }
            Node::Rot(a) => {
                let a = o(a);
                quote!(graphrw::generated::rotate_half(__b, #a)?)
            }
            Node::RotT(a) => {
                let a = o(a);
                quote!(graphrw::generated::rotate_half_transpose(__b, #a)?)
            }
            Node::InputRot(_) | Node::HalfNeg(_) => {
                unreachable!("lowered rotations exist only in code generation")
            }
        };
        st.push(quote!(let #v: graphrw::Value = #call;));
    }
    let r = format_ident!("v{}", root);
    let scal = snames.iter().enumerate().map(|(k, n)| {
        let s = format_ident!("s{}", k);
        quote! {
            let #s: f64 = __a.float(#n).map_err(|e| graphrw::GraphError::Signature {
                op: #op,
                node: None,
                message: e.0,
            })?;
        }
    });
    let row = row_of.unwrap_or(0);
    let dt = if need_dt || need_n {
        quote!(let __dt: graphrw::DType = __b.meta(__x[#row])?.dtype;)
    } else {
        quote!()
    };
    // The row length, counted in f32 (exact) over a tensor of the full shape.
    let n = if need_n {
        quote! {
            let __n: graphrw::Value = {
                let __ones = __b.where_(
                    __b.eq(__x[#row], __x[#row])?,
                    __b.scalar(1.0, graphrw::DType::F32).value(),
                    1.0,
                )?;
                let __count = __b.sum_with(__ones, &[-1], true)?;
                __b.cast(__count, __dt)?
            };
        }
    } else {
        quote!()
    };
    quote! {
        /// The decomposition into built-in ops (the op's `like` and its fallback).
        pub fn decompose(
            __b: &graphrw::Builder,
            __x: &[graphrw::Value],
            __a: &graphrw::ops::Attrs,
        ) -> ::core::result::Result<::std::vec::Vec<graphrw::Value>, graphrw::GraphError> {
            if __x.len() != #nt {
                return Err(graphrw::GraphError::Signature {
                    op: #op,
                    node: None,
                    message: ::std::format!("takes {} tensor operands, got {}", #nt, __x.len()),
                });
            }
            #(#scal)*
            #dt
            #n
            #(#st)*
            Ok(::std::vec![#r])
        }
    }
}

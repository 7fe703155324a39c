//! Code generation (quote): the pattern module (`PATTERN` static tree, typed `Match`,
//! `OUTPUTS`, constraint functions), replacement functions, rules and rule sets.
//! Generated code reaches graphrw only through `graphrw::__private`.

use proc_macro2::{Literal, Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::{Block, Ident, Type};

use super::lower::Lowered;
use super::parse::{FnParam, PatternFn};
use super::sema::{AttrKey, IAttr, ICheck, INode, ITerm, Ir, Lit, OpRef, PKind};
use crate::optable::static_ident;
use crate::vocab::Kind;

fn u16_lit(n: usize) -> Literal {
    Literal::u16_unsuffixed(n as u16)
}

fn p() -> TokenStream {
    quote!(graphrw::__private)
}

fn dtype_tokens(name: &str) -> TokenStream {
    let v = match name {
        "f32" => "F32",
        "f64" => "F64",
        "f16" => "F16",
        "bf16" => "BF16",
        "i64" => "I64",
        "i32" => "I32",
        _ => "Bool",
    };
    let v = Ident::new(v, Span::call_site());
    let p = p();
    quote!(#p::DType::#v)
}

/// The Rust type of a typed-match field of kind `k`.
pub fn field_type(k: PKind) -> TokenStream {
    let p = p();
    match k {
        PKind::Tensor => quote!(#p::Value),
        PKind::Int => quote!(i64),
        PKind::Float => quote!(f64),
        PKind::Bool => quote!(bool),
        PKind::Ints => quote!(::std::vec::Vec<i64>),
        PKind::Str => quote!(::std::string::String),
        PKind::DType => quote!(#p::DType),
    }
}

fn param_kind(k: PKind) -> TokenStream {
    let p = p();
    let v = format_ident!(
        "{}",
        match k {
            PKind::Tensor => "Tensor",
            PKind::Int => "Int",
            PKind::Float => "Float",
            PKind::Bool => "Bool",
            PKind::Ints => "Ints",
            PKind::Str => "Str",
            PKind::DType => "DType",
        }
    );
    quote!(#p::ParamKind::#v)
}

fn getter(k: PKind, slot: usize) -> TokenStream {
    let s = u16_lit(slot);
    match k {
        PKind::Tensor => quote!(__b.value(#s)),
        PKind::Int => quote!(__b.int(#s)),
        PKind::Float => quote!(__b.float(#s)),
        PKind::Bool => quote!(__b.bool(#s)),
        PKind::Ints => quote!(__b.ints(#s)),
        PKind::Str => quote!(__b.string(#s)),
        PKind::DType => quote!(__b.dtype(#s)),
    }
}

fn lit_tokens(l: &Lit) -> TokenStream {
    let p = p();
    match l {
        Lit::Int(v) => quote!(#p::AttrPat::Int(#v)),
        Lit::Float(v) => quote!(#p::AttrPat::Float(#v)),
        Lit::Bool(v) => quote!(#p::AttrPat::Bool(#v)),
        Lit::Ints(v) => quote!(#p::AttrPat::Ints(&[#(#v),*])),
        Lit::Str(v) => quote!(#p::AttrPat::Str(#v)),
        Lit::DType(v) => {
            let d = dtype_tokens(v);
            quote!(#p::AttrPat::DType(#d))
        }
        Lit::Null => quote!(#p::AttrPat::Null),
    }
}

fn attr_tokens(a: &IAttr) -> TokenStream {
    let p = p();
    match a {
        IAttr::Lit(l) => lit_tokens(l),
        IAttr::Param(s) => {
            let s = u16_lit(*s);
            quote!(#p::AttrPat::Param(#s))
        }
        IAttr::OneOf(ls) => {
            let ls = ls.iter().map(lit_tokens);
            quote!(#p::AttrPat::OneOf(&[#(#ls),*]))
        }
    }
}

fn kind_tokens(k: Kind) -> TokenStream {
    let p = p();
    let v = format_ident!("{}", format!("{k:?}"));
    quote!(#p::AttrKind::#v)
}

fn op_tokens(op: &OpRef, operands: usize, more: bool) -> TokenStream {
    let p = p();
    match op {
        OpRef::Builtin(spec) => {
            let s = static_ident(spec.name);
            quote!(&#p::builtin::#s)
        }
        OpRef::User(path) => {
            let span = syn::spanned::Spanned::span(path);
            let _ = p;
            quote_spanned!(span=> graphrw::__private::user_op_with_operands(&#path, #operands, #more))
        }
    }
}

fn node_tokens(ir: &Ir, n: &INode) -> TokenStream {
    let p = p();
    match n {
        INode::Any => quote!(#p::PatNode::Any),
        INode::Tensor(s) => {
            let s = u16_lit(*s);
            quote!(#p::PatNode::Tensor(#s))
        }
        INode::ConstValue(v) => quote!(#p::PatNode::Const(#p::ConstPat::Value(#v))),
        INode::ConstParam(s) => {
            let s = u16_lit(*s);
            quote!(#p::PatNode::Const(#p::ConstPat::Param(#s)))
        }
        INode::Op(o) => {
            let op = op_tokens(&o.op, o.operands.len(), o.more);
            let operands = o.operands.iter().map(|&x| u16_lit(x));
            let more = o.more;
            let attrs = o.attrs.iter().map(|a| {
                let pat = attr_tokens(&a.pat);
                match &a.key {
                    AttrKey::Builtin(i, name) => {
                        quote!(#p::AttrCheck { index: #i, name: #name, pat: #pat })
                    }
                    AttrKey::User(id, kind) => {
                        let name = id.to_string();
                        let kind = match kind {
                            Some(k) => {
                                let k = kind_tokens(*k);
                                quote!(Some(#k))
                            }
                            None => quote!(None),
                        };
                        let OpRef::User(path) = &o.op else { unreachable!("user attrs are on user ops") };
                        let index = quote_spanned!(id.span()=> graphrw::__private::user_attr_index(&#path, #name, #kind));
                        quote!(#p::AttrCheck { index: #index, name: #name, pat: #pat })
                    }
                }
            });
            let slot = match o.slot {
                Some(s) => {
                    let s = u16_lit(s);
                    quote!(Some(#s))
                }
                None => quote!(None),
            };
            quote!(#p::PatNode::Op(#p::OpPat {
                op: #op,
                operands: &[#(#operands),*],
                more_operands: #more,
                attrs: &[#(#attrs),*],
                slot: #slot,
            }))
        }
        INode::Alt(bs) => {
            let bs = bs.iter().map(|&b| u16_lit(b));
            quote!(#p::PatNode::Alt(&[#(#bs),*]))
        }
        INode::Repeat {
            body,
            base,
            min,
            max,
        } => {
            let (body, base) = (u16_lit(*body), u16_lit(*base));
            let (min, max) = (Literal::u16_unsuffixed(*min), Literal::u16_unsuffixed(*max));
            quote!(#p::PatNode::Repeat(#p::RepeatPat { body: #body, base: #base, min: #min, max: #max }))
        }
        INode::Hole(r) => {
            let r = u16_lit(*r);
            let _ = ir;
            quote!(#p::PatNode::Hole(#r))
        }
    }
}

fn term_tokens(t: &ITerm) -> TokenStream {
    let p = p();
    match t {
        ITerm::Rank(s) => {
            let s = u16_lit(*s);
            quote!(#p::Term::Rank(#s))
        }
        ITerm::DType(s) => {
            let s = u16_lit(*s);
            quote!(#p::Term::DType(#s))
        }
        ITerm::Dim(s, i) => {
            let s = u16_lit(*s);
            quote!(#p::Term::Dim(#s, #i))
        }
        ITerm::Users(s) => {
            let s = u16_lit(*s);
            quote!(#p::Term::Users(#s))
        }
        ITerm::Param(s) => {
            let s = u16_lit(*s);
            quote!(#p::Term::Param(#s))
        }
        ITerm::Int(v) => quote!(#p::Term::Int(#v)),
        ITerm::Float(v) => quote!(#p::Term::Float(#v)),
        ITerm::DTypeLit(d) => {
            let d = dtype_tokens(d);
            quote!(#p::Term::DTypeLit(#d))
        }
        ITerm::Bool(v) => quote!(#p::Term::Bool(#v)),
    }
}

/// The items of a pattern module (inside `mod name { .. }`), plus `extra` items.
pub fn pattern_module(f: &PatternFn, ir: &Ir, low: &Lowered, extra: TokenStream) -> TokenStream {
    let p = p();
    let name = &f.name;
    let name_str = name.to_string();
    let params = ir.params.iter().map(|q| {
        let n = q.name.to_string();
        let k = param_kind(q.kind.expect("sema checked kinds"));
        quote!(#p::Param { name: #n, kind: #k })
    });
    let slots = u16_lit(ir.slots);
    let nodes = ir.nodes.iter().map(|n| node_tokens(ir, n));
    let roots = ir.roots.iter().zip(&low.links).map(|(&r, link)| {
        let r = u16_lit(r);
        let link = match link {
            Some((s, d)) => {
                let s = u16_lit(*s);
                let d = Literal::u16_unsuffixed(*d);
                quote!(Some(#p::Link { slot: #s, depth: #d }))
            }
            None => quote!(None),
        };
        quote!(#p::Root { node: #r, link: #link })
    });
    let anchors = low.anchors.iter().map(|a| op_tokens(a, 0, true));
    let mut check_fns = Vec::new();
    let constraints: Vec<TokenStream> = ir
        .constraints
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let reads = c.reads.iter().map(|&s| u16_lit(s));
            let text = &c.text;
            let check = match &c.check {
                ICheck::Compare(l, op, r) => {
                    let (l, r) = (term_tokens(l), term_tokens(r));
                    let op = format_ident!("{}", format!("{op:?}"));
                    quote!(#p::Check::Compare(#l, #p::CmpOp::#op, #r))
                }
                ICheck::Pred(path) => quote!(#p::Check::Pred(#path)),
                ICheck::Closure(args, body) => {
                    let f = format_ident!("__check_{}", i);
                    let lets = args.iter().map(|(id, s, k)| {
                        let get = match k {
                            PKind::Tensor => {
                                let sl = u16_lit(*s);
                                quote!(__b.tensor(__g, #sl))
                            }
                            // Borrowed: a check runs at every candidate, a copy per run
                            // would be an allocation per candidate.
                            PKind::Ints => {
                                let sl = u16_lit(*s);
                                quote!(__b.ints_ref(#sl))
                            }
                            k => getter(*k, *s),
                        };
                        quote!(let #id = #get;)
                    });
                    check_fns.push(quote! {
                        #[allow(unused_variables, clippy::all)]
                        fn #f(__g: &#p::Graph, __b: &#p::Bindings) -> bool {
                            #(#lets)*
                            #body
                        }
                    });
                    quote!(#p::Check::Pred(#f))
                }
            };
            quote!(#p::Constraint { reads: &[#(#reads),*], check: #check, text: #text })
        })
        .collect();
    let op_count = Literal::u16_unsuffixed(low.op_count);
    let outputs = ir.roots.len();
    let match_struct = match_struct(
        f,
        ir.params.iter().map(|q| (&q.name, q.kind)),
        quote! {
            fn pattern() -> &'static #p::Pattern { &PATTERN }
        },
        true,
    );
    let params_consts = params_consts(f, ir.params.iter().map(|q| (&q.name, q.kind)));
    let doc = format!("The compiled tree of pattern `{name_str}`.");
    quote! {
        #[allow(unused_imports)]
        use super::*;
        #[doc = #doc]
        pub static PATTERN: #p::Pattern = #p::Pattern {
            name: #name_str,
            location: concat!(file!(), ":", line!()),
            params: &[#(#params),*],
            slots: #slots,
            nodes: &[#(#nodes),*],
            roots: &[#(#roots),*],
            anchors: &[#(#anchors),*],
            constraints: &[#(#constraints),*],
            op_count: #op_count,
        };
        /// Number of outputs of the pattern (its roots).
        pub const OUTPUTS: usize = #outputs;
        #params_consts
        #match_struct
        #(#check_fns)*
        #extra
    }
}

/// `__PARAMS` (parameter names) and `__MISSING` (the message a replacement that lacks
/// each gets), read by the const check `replacement!` emits.
fn params_consts<'a>(
    f: &PatternFn,
    params: impl Iterator<Item = (&'a Ident, Option<PKind>)>,
) -> TokenStream {
    let params: Vec<(String, &str)> = params
        .map(|(n, k)| (n.to_string(), k.map(PKind::type_name).unwrap_or("_")))
        .collect();
    let sig: Vec<String> = params.iter().map(|(n, t)| format!("{n}: {t}")).collect();
    let names = params.iter().map(|(n, _)| n);
    let msgs = params.iter().map(|(n, t)| {
        format!(
            "the replacement lacks parameter `{n}: {t}` of pattern `{}`; a replacement takes exactly its pattern's parameters ({})",
            f.name,
            sig.join(", ")
        )
    });
    quote! {
        #[doc(hidden)]
        pub const __PARAMS: &[&str] = &[#(#names),*];
        #[doc(hidden)]
        pub const __MISSING: &[&str] = &[#(#msgs),*];
    }
}

/// The typed match struct; `real` false makes `from_bindings` unreachable (stubs).
fn match_struct<'a>(
    f: &PatternFn,
    params: impl Iterator<Item = (&'a Ident, Option<PKind>)>,
    pattern_fn: TokenStream,
    real: bool,
) -> TokenStream {
    let p = p();
    let mut fields = Vec::new();
    let mut inits = Vec::new();
    for (slot, (name, kind)) in params.enumerate() {
        let Some(kind) = kind else { continue };
        let ty = field_type(kind);
        let doc = format!("Parameter `{name}: {}`.", kind.type_name());
        fields.push(quote!(#[doc = #doc] pub #name: #ty));
        let get = getter(kind, slot);
        inits.push(quote!(#name: #get));
    }
    let doc = format!(
        "The bindings of a match of pattern `{}`, one field per parameter.",
        f.name
    );
    let body = if real {
        quote!(Match { #(#inits),* })
    } else {
        quote!({
            let _ = __b;
            unreachable!("pattern with errors")
        })
    };
    quote! {
        #[doc = #doc]
        #[derive(Clone, Debug, PartialEq)]
        pub struct Match { #(#fields),* }
        impl #p::PatternMatch for Match {
            #pattern_fn
            fn from_bindings(__b: &#p::Bindings) -> Self { #body }
        }
    }
}

/// A pattern module for a pattern with errors: same names, nothing that can match.
pub fn stub_module(f: &PatternFn, extra: TokenStream) -> TokenStream {
    let p = p();
    let outputs = match &f.ret {
        Type::Tuple(t) => t.elems.len(),
        _ => 1,
    };
    let kinds: Vec<(Ident, Option<PKind>)> = f
        .params
        .iter()
        .map(|q| (q.name.clone(), PKind::from_type(&q.ty)))
        .collect();
    let mut seen = Vec::new();
    let kinds: Vec<(Ident, Option<PKind>)> = kinds
        .into_iter()
        .filter(|(n, _)| {
            let fresh = !seen.contains(n);
            seen.push(n.clone());
            fresh
        })
        .collect();
    let params_consts = params_consts(f, kinds.iter().map(|(n, k)| (n, *k)));
    let ms = match_struct(
        f,
        kinds.iter().map(|(n, k)| (n, *k)),
        quote!(fn pattern() -> &'static #p::Pattern { &PATTERN }),
        false,
    );
    quote! {
        #[allow(unused_imports)]
        use super::*;
        /// A pattern with errors (see the compiler's messages).
        pub static PATTERN: #p::Pattern = #p::Pattern::STUB;
        /// Number of outputs.
        pub const OUTPUTS: usize = #outputs;
        #params_consts
        #ms
        #extra
    }
}

/// Wraps module items into `vis mod name { .. }` with the function's docs.
pub fn wrap_module(f: &PatternFn, items: TokenStream) -> TokenStream {
    let docs = f.attrs.iter().filter(|a| a.path().is_ident("doc"));
    let vis = &f.vis;
    let name = &f.name;
    let fallback = format!("Pattern `{name}` (generated by `pattern!`).");
    let has_doc = f.attrs.iter().any(|a| a.path().is_ident("doc"));
    let fallback = (!has_doc).then(|| quote!(#[doc = #fallback]));
    quote! {
        #(#docs)*
        #fallback
        #[allow(dead_code, non_snake_case, clippy::all)]
        #vis mod #name {
            #items
        }
    }
}

/// A replacement function. `target` is the path of the pattern module; `builder` is the
/// name the body uses for the builder, if any. Emits rustc-checked bindings spanned at
/// the user's tokens: a struct pattern over the pattern's `Match` (missing or extra
/// parameters), a typed `let` per parameter, and a const assertion of the output count.
#[allow(clippy::too_many_arguments)]
pub fn replacement_fn(
    attrs: TokenStream,
    vis: TokenStream,
    name: &Ident,
    params: &[FnParam],
    builder: Option<&Ident>,
    ret: &Type,
    target: TokenStream,
    body: &Block,
) -> TokenStream {
    let p = p();
    let mut fields = Vec::new();
    let mut checks = Vec::new();
    let mut body_params = Vec::new();
    let mut args = Vec::new();
    for q in params {
        let n = &q.name;
        fields.push(quote!(#n));
        let kind = PKind::from_type(&q.ty);
        let Some(kind) = kind else {
            checks.push(quote_spanned!(syn::spanned::Spanned::span(&q.ty)=>
                compile_error!("unsupported parameter type: use `Tensor`, `f64`, `i64`, `bool`, `Ints`, `String` or `DType`");));
            continue;
        };
        let check_ty = field_type(kind);
        let ty_span = syn::spanned::Spanned::span(&q.ty);
        let check_ty = quote_spanned!(ty_span=> #check_ty);
        checks.push(quote!(let #n: #check_ty = #n;));
        match kind {
            PKind::Tensor => {
                body_params.push(quote!(#n: #p::Var<'__b>));
                args.push(quote!(__bld.var(#n)));
            }
            k => {
                let t = field_type(k);
                body_params.push(quote!(#n: #t));
                args.push(quote!(#n));
            }
        }
    }
    let (ret_ty, n_out) = match ret {
        Type::Tuple(t) => {
            let vars = t.elems.iter().map(|_| quote!(#p::Var<'__b>));
            (quote!((#(#vars),*)), t.elems.len())
        }
        _ => (quote!(#p::Var<'__b>), 1),
    };
    let msg = format!(
        "replacement `{name}` returns {n_out} value(s) but its pattern has another number of outputs; make the return type match the pattern's"
    );
    let ret_span = syn::spanned::Spanned::span(ret);
    let out_check =
        quote_spanned!(ret_span=> const _: () = ::core::assert!(#target::OUTPUTS == #n_out, #msg););
    let (bparam, barg) = match builder {
        Some(b) => (quote!(#b: &'__b #p::Builder,), quote!(__bld,)),
        None => (quote!(), quote!()),
    };
    let target_span = target
        .clone()
        .into_iter()
        .next()
        .map(|t| t.span())
        .unwrap_or_else(|| name.span());
    let given: Vec<String> = params.iter().map(|q| q.name.to_string()).collect();
    let name_span = name.span();
    let missing_check = quote_spanned!(name_span=>
        const _: () = match graphrw::__private::missing_param(#target::__PARAMS, &[#(#given),*]) {
            ::core::option::Option::Some(i) => ::core::panic!("{}", #target::__MISSING[i]),
            ::core::option::Option::None => (),
        };);
    let destructure = quote_spanned!(target_span=> let #target::Match { #(#fields,)* .. } =
        <#target::Match as #p::PatternMatch>::from_bindings(__m););
    quote! {
        #attrs
        #[allow(clippy::all)]
        #vis fn #name(
            __bld: &#p::Builder,
            __m: &#p::Bindings,
        ) -> ::core::result::Result<::std::vec::Vec<#p::Value>, #p::GraphError> {
            #missing_check
            #destructure
            #out_check
            #(#checks)*
            #[allow(unused_variables, unused_mut, unused_braces, clippy::all)]
            fn __body<'__b>(#bparam #(#body_params),*) -> ::core::result::Result<#ret_ty, #p::GraphError> {
                ::core::result::Result::Ok(#body)
            }
            let __out = __body(#barg #(#args),*)?;
            ::core::result::Result::Ok(#p::IntoOutputs::into_outputs(__out))
        }
    }
}

/// Prints generated code to stderr when `GRAPHRW_DUMP_PATTERNS` is set at compile time.
pub fn dump(what: &str, tokens: &TokenStream) {
    if std::env::var_os("GRAPHRW_DUMP_PATTERNS").is_some_and(|v| v != "0") {
        eprintln!("// ---- graphrw: code generated for {what} ----\n{tokens}\n");
    }
}

/// Doc attributes of a function, as tokens.
pub fn doc_attrs(attrs: &[syn::Attribute]) -> TokenStream {
    let docs = attrs.iter().filter(|a| a.path().is_ident("doc"));
    quote!(#(#docs)*)
}

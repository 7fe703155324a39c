//! Code generation (quote): the pattern module (`PATTERN` static tree, typed `Match`,
//! `OUTPUTS`, constraint functions), replacement functions, rules and rule sets.
//! Generated code reaches graphrw only through `graphrw::__private`.

use proc_macro2::{Literal, Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::{Block, Ident, Type};

use super::ir::{param_type, AttrKey, AttrPattern, Check, Ir, Lit, Node, OpRef, ParamKind, Term};
use super::lower::Lowered;
use super::parse::{FnParam, PatternFn};
use crate::optable::static_ident;
use crate::vocab::Kind;

fn u16_lit(n: usize) -> Literal {
    Literal::u16_unsuffixed(n as u16)
}

/// The path generated code reaches graphrw through.
fn private_path() -> TokenStream {
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
    let rt = private_path();
    quote!(#rt::DType::#v)
}

/// The Rust type of a typed-match field of kind `k`.
pub fn field_type(k: ParamKind) -> TokenStream {
    let rt = private_path();
    match k {
        ParamKind::Tensor => quote!(#rt::Value),
        ParamKind::Int => quote!(i64),
        ParamKind::Float => quote!(f64),
        ParamKind::Bool => quote!(bool),
        ParamKind::Ints => quote!(::std::vec::Vec<i64>),
        ParamKind::Str => quote!(::std::string::String),
        ParamKind::DType => quote!(#rt::DType),
    }
}

fn param_kind(k: ParamKind) -> TokenStream {
    let rt = private_path();
    let v = format_ident!(
        "{}",
        match k {
            ParamKind::Tensor => "Tensor",
            ParamKind::Int => "Int",
            ParamKind::Float => "Float",
            ParamKind::Bool => "Bool",
            ParamKind::Ints => "Ints",
            ParamKind::Str => "Str",
            ParamKind::DType => "DType",
        }
    );
    quote!(#rt::ParamKind::#v)
}

fn getter(k: ParamKind, slot: usize) -> TokenStream {
    let s = u16_lit(slot);
    match k {
        ParamKind::Tensor => quote!(__b.value(#s)),
        ParamKind::Int => quote!(__b.int(#s)),
        ParamKind::Float => quote!(__b.float(#s)),
        ParamKind::Bool => quote!(__b.bool(#s)),
        ParamKind::Ints => quote!(__b.ints(#s)),
        ParamKind::Str => quote!(__b.string(#s)),
        ParamKind::DType => quote!(__b.dtype(#s)),
    }
}

fn lit_tokens(l: &Lit) -> TokenStream {
    let rt = private_path();
    match l {
        Lit::Int(v) => quote!(#rt::AttrPat::Int(#v)),
        Lit::Float(v) => quote!(#rt::AttrPat::Float(#v)),
        Lit::Bool(v) => quote!(#rt::AttrPat::Bool(#v)),
        Lit::Ints(v) => quote!(#rt::AttrPat::Ints(&[#(#v),*])),
        Lit::Str(v) => quote!(#rt::AttrPat::Str(#v)),
        Lit::DType(v) => {
            let d = dtype_tokens(v);
            quote!(#rt::AttrPat::DType(#d))
        }
        Lit::Null => quote!(#rt::AttrPat::Null),
    }
}

fn attr_tokens(a: &AttrPattern) -> TokenStream {
    let rt = private_path();
    match a {
        AttrPattern::Lit(l) => lit_tokens(l),
        AttrPattern::Param(s) => {
            let s = u16_lit(*s);
            quote!(#rt::AttrPat::Param(#s))
        }
        AttrPattern::OneOf(ls) => {
            let ls = ls.iter().map(lit_tokens);
            quote!(#rt::AttrPat::OneOf(&[#(#ls),*]))
        }
    }
}

fn kind_tokens(k: Kind) -> TokenStream {
    let rt = private_path();
    let v = format_ident!("{}", format!("{k:?}"));
    quote!(#rt::AttrKind::#v)
}

fn op_tokens(op: &OpRef, operands: usize, more: bool) -> TokenStream {
    let rt = private_path();
    match op {
        OpRef::Builtin(spec) => {
            let s = static_ident(spec.name);
            quote!(&#rt::builtin::#s)
        }
        OpRef::User(path) => {
            // The op's own name (`SCALE` of `my_ops::SCALE`): a span of several tokens
            // would be cut to its first on stable Rust.
            let span = path
                .segments
                .last()
                .map_or_else(|| syn::spanned::Spanned::span(path), |s| s.ident.span());
            let arms = operand_count_arms(path, operands, more);
            quote_spanned! {span=>
                match graphrw::__private::user_op_operand_range(&#path) {
                    (min, max) if !((#operands < min && !#more) || #operands > max) => {
                        graphrw::__private::user_op_with_operands(&#path, #operands, #more)
                    }
                    #arms
                }
            }
        }
    }
}

/// The arms of the operand-count check of a call of the user op `path` with `given`
/// operands (`more`: or more, `..`): one per operand range the op may declare that the
/// call does not fit, each panicking at compile time with both counts in its message
/// (a `const` panic cannot format a number the macro does not know, so each range has
/// its own literal), spanned at the call.
fn operand_count_arms(path: &syn::Path, given: usize, more: bool) -> TokenStream {
    /// Ranges up to this many operands get their own message.
    const LISTED: usize = 8;
    let span = path
        .segments
        .last()
        .map_or_else(|| syn::spanned::Spanned::span(path), |s| s.ident.span());
    let name = tidy_path(path);
    let gives = if more {
        format!("the pattern gives it {given} or more")
    } else {
        format!("the pattern gives it {given}")
    };
    let hint = "check the call against the op's `OpDef` (its `operands`)";
    let fits = |min: usize, max: usize| !((given < min && !more) || given > max);
    let mut arms = TokenStream::new();
    for min in 0..=LISTED {
        for max in (min..=LISTED).chain([usize::MAX]) {
            if fits(min, max) {
                continue;
            }
            let takes = match max {
                usize::MAX => format!("{min} or more operands"),
                m if m == min => format!("{min} operand{}", if min == 1 { "" } else { "s" }),
                m => format!("{min} to {m} operands"),
            };
            let msg = format!("`{name}` takes {takes}, {gives}: {hint}");
            let max = if max == usize::MAX {
                quote!(usize::MAX)
            } else {
                quote!(#max)
            };
            arms.extend(quote_spanned!(span=> (#min, #max) => panic!(#msg),));
        }
    }
    let msg =
        format!("`{name}` takes another number of operands (more than {LISTED}), {gives}: {hint}");
    arms.extend(quote_spanned!(span=> _ => panic!(#msg),));
    arms
}

/// A path as written, without the spaces of its token stream (`my_ops::SCALE`).
fn tidy_path(path: &syn::Path) -> String {
    quote!(#path).to_string().replace(' ', "")
}

fn node_tokens(n: &Node) -> TokenStream {
    let rt = private_path();
    match n {
        Node::Any => quote!(#rt::PatNode::Any),
        Node::Tensor(s) => {
            let s = u16_lit(*s);
            quote!(#rt::PatNode::Tensor(#s))
        }
        Node::ConstValue(v) => quote!(#rt::PatNode::Const(#rt::ConstPat::Value(#v))),
        Node::ConstParam(s) => {
            let s = u16_lit(*s);
            quote!(#rt::PatNode::Const(#rt::ConstPat::Param(#s)))
        }
        Node::Op(o) => {
            let op = op_tokens(&o.op, o.operands.len(), o.more);
            let operands = o.operands.iter().map(|&x| u16_lit(x));
            let more = o.more;
            let attrs = o.attrs.iter().map(|a| {
                let pat = attr_tokens(&a.pat);
                match &a.key {
                    AttrKey::Builtin(i, name) => {
                        quote!(#rt::AttrCheck { index: #i, name: #name, pat: #pat })
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
                        quote!(#rt::AttrCheck { index: #index, name: #name, pat: #pat })
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
            quote!(#rt::PatNode::Op(#rt::OpPat {
                op: #op,
                operands: &[#(#operands),*],
                more_operands: #more,
                attrs: &[#(#attrs),*],
                slot: #slot,
            }))
        }
        Node::Alt(bs) => {
            let bs = bs.iter().map(|&b| u16_lit(b));
            quote!(#rt::PatNode::Alt(&[#(#bs),*]))
        }
        Node::Repeat {
            body,
            base,
            min,
            max,
        } => {
            let (body, base) = (u16_lit(*body), u16_lit(*base));
            let (min, max) = (Literal::u16_unsuffixed(*min), Literal::u16_unsuffixed(*max));
            quote!(#rt::PatNode::Repeat(#rt::RepeatPat { body: #body, base: #base, min: #min, max: #max }))
        }
        Node::Hole(r) => {
            let r = u16_lit(*r);
            quote!(#rt::PatNode::Hole(#r))
        }
    }
}

fn term_tokens(t: &Term) -> TokenStream {
    let rt = private_path();
    match t {
        Term::Rank(s) => {
            let s = u16_lit(*s);
            quote!(#rt::Term::Rank(#s))
        }
        Term::DType(s) => {
            let s = u16_lit(*s);
            quote!(#rt::Term::DType(#s))
        }
        Term::Dim(s, i) => {
            let s = u16_lit(*s);
            quote!(#rt::Term::Dim(#s, #i))
        }
        Term::Users(s) => {
            let s = u16_lit(*s);
            quote!(#rt::Term::Users(#s))
        }
        Term::Param(s) => {
            let s = u16_lit(*s);
            quote!(#rt::Term::Param(#s))
        }
        Term::Int(v) => quote!(#rt::Term::Int(#v)),
        Term::Float(v) => quote!(#rt::Term::Float(#v)),
        Term::DTypeLit(d) => {
            let d = dtype_tokens(d);
            quote!(#rt::Term::DTypeLit(#d))
        }
        Term::Bool(v) => quote!(#rt::Term::Bool(#v)),
    }
}

/// The items of a pattern module (inside `mod name { .. }`), plus `extra` items.
pub fn pattern_module(f: &PatternFn, ir: &Ir, low: &Lowered, extra: TokenStream) -> TokenStream {
    let rt = private_path();
    let name = &f.name;
    let name_str = name.to_string();
    let params = ir.params.iter().map(|q| {
        let n = q.name.to_string();
        let k = param_kind(q.kind.expect("sema checked kinds"));
        quote!(#rt::Param { name: #n, kind: #k })
    });
    let slots = u16_lit(ir.slots);
    let nodes = ir.nodes.iter().map(node_tokens);
    let roots = ir.roots.iter().zip(&low.links).map(|(&r, link)| {
        let r = u16_lit(r);
        let link = match link {
            Some((s, d)) => {
                let s = u16_lit(*s);
                let d = Literal::u16_unsuffixed(*d);
                quote!(Some(#rt::Link { slot: #s, depth: #d }))
            }
            None => quote!(None),
        };
        quote!(#rt::Root { node: #r, link: #link })
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
                Check::Compare(l, op, r) => {
                    let (l, r) = (term_tokens(l), term_tokens(r));
                    let op = format_ident!("{}", format!("{op:?}"));
                    quote!(#rt::Check::Compare(#l, #rt::CmpOp::#op, #r))
                }
                Check::Pred(path) => quote!(#rt::Check::Pred(#path)),
                Check::Closure(args, body) => {
                    let f = format_ident!("__check_{}", i);
                    let lets = args.iter().map(|(id, s, k)| {
                        let get = match k {
                            ParamKind::Tensor => {
                                let sl = u16_lit(*s);
                                quote!(__b.tensor(__g, #sl))
                            }
                            // Borrowed: a check runs at every candidate, a copy per run
                            // would be an allocation per candidate.
                            ParamKind::Ints => {
                                let sl = u16_lit(*s);
                                quote!(__b.ints_ref(#sl))
                            }
                            k => getter(*k, *s),
                        };
                        quote!(let #id = #get;)
                    });
                    check_fns.push(quote! {
                        #[allow(unused_variables, clippy::all)]
                        fn #f(__g: &#rt::Graph, __b: &#rt::Bindings) -> bool {
                            #(#lets)*
                            #body
                        }
                    });
                    quote!(#rt::Check::Pred(#f))
                }
            };
            quote!(#rt::Constraint { reads: &[#(#reads),*], check: #check, text: #text })
        })
        .collect();
    let op_count = Literal::u16_unsuffixed(low.op_count);
    let outputs = ir.roots.len();
    let match_struct = match_struct(
        f,
        ir.params
            .iter()
            .map(|q| (&q.name, q.kind.map(|k| (k, q.optional)))),
        quote! {
            fn pattern() -> &'static #rt::Pattern { &PATTERN }
        },
        true,
    );
    let params_consts = params_consts(
        f,
        ir.params
            .iter()
            .map(|q| (&q.name, q.kind.map(|k| (k, q.optional)))),
    );
    let doc = format!("The compiled tree of pattern `{name_str}`.");
    let location = location(f);
    quote! {
        #[allow(unused_imports)]
        use super::*;
        #[doc = #doc]
        pub static PATTERN: #rt::Pattern = #rt::Pattern {
            name: #name_str,
            location: #location,
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
    params: impl Iterator<Item = (&'a Ident, Option<(ParamKind, bool)>)>,
) -> TokenStream {
    let params: Vec<(String, String)> = params
        .map(|(n, k)| {
            let t = match k {
                Some((k, false)) => k.type_name().to_string(),
                Some((k, true)) => format!("Option<{}>", k.type_name()),
                None => "_".to_string(),
            };
            (n.to_string(), t)
        })
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
    params: impl Iterator<Item = (&'a Ident, Option<(ParamKind, bool)>)>,
    pattern_fn: TokenStream,
    real: bool,
) -> TokenStream {
    let rt = private_path();
    let mut fields = Vec::new();
    let mut inits = Vec::new();
    for (slot, (name, kind)) in params.enumerate() {
        let Some((kind, optional)) = kind else {
            continue;
        };
        let ty = field_type(kind);
        let get = getter(kind, slot);
        if optional {
            let doc = format!(
                "Parameter `{name}: Option<{}>` (`None` when its optional part is absent).",
                kind.type_name()
            );
            fields.push(quote!(#[doc = #doc] pub #name: ::core::option::Option<#ty>));
            let s = u16_lit(slot);
            inits.push(quote!(#name: if __b.is_bound(#s) { ::core::option::Option::Some(#get) } else { ::core::option::Option::None }));
        } else {
            let doc = format!("Parameter `{name}: {}`.", kind.type_name());
            fields.push(quote!(#[doc = #doc] pub #name: #ty));
            inits.push(quote!(#name: #get));
        }
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
        impl #rt::PatternMatch for Match {
            #pattern_fn
            fn from_bindings(__b: &#rt::Bindings) -> Self { #body }
        }
    }
}

/// A pattern module for a pattern with errors: same names, nothing that can match.
pub fn stub_module(f: &PatternFn, extra: TokenStream) -> TokenStream {
    let rt = private_path();
    let outputs = match &f.ret {
        Type::Tuple(t) => t.elems.len(),
        _ => 1,
    };
    let kinds: Vec<(Ident, Option<(ParamKind, bool)>)> = f
        .params
        .iter()
        .map(|q| (q.name.clone(), param_type(&q.ty)))
        .collect();
    let mut seen = Vec::new();
    let kinds: Vec<(Ident, Option<(ParamKind, bool)>)> = kinds
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
        quote!(fn pattern() -> &'static #rt::Pattern { &PATTERN }),
        false,
    );
    quote! {
        #[allow(unused_imports)]
        use super::*;
        /// A pattern with errors (see the compiler's messages).
        pub static PATTERN: #rt::Pattern = #rt::Pattern::STUB;
        /// Number of outputs.
        pub const OUTPUTS: usize = #outputs;
        #params_consts
        #ms
        #extra
    }
}

/// Wraps module items into `vis mod name { .. }` with the function's docs.
/// `file:line` of the pattern function's name: its own line (not the macro call's, which
/// `line!()` gives for every rule of a `rule_set!`), where the compiler can say it.
fn location(f: &PatternFn) -> TokenStream {
    if proc_macro::is_available() {
        let line = f.name.span().unwrap().line() as u32;
        quote!(concat!(file!(), ":", #line))
    } else {
        quote!(concat!(file!(), ":", line!()))
    }
}

pub fn wrap_module(f: &PatternFn, items: TokenStream) -> TokenStream {
    let docs = f.attrs.iter().filter(|a| a.path().is_ident("doc"));
    let vis = &f.vis;
    let name = &f.name;
    let fallback = format!("Pattern `{name}` (generated by `pattern!`).");
    let has_doc = f.attrs.iter().any(|a| a.path().is_ident("doc"));
    let fallback = (!has_doc).then(|| quote!(#[doc = #fallback]));
    // Spanned at the rule's name, so that rustc's "module is defined here" (after
    // "module is private") points there, where `pub` goes, not at the macro call.
    quote_spanned! {name.span()=>
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
    let rt = private_path();
    let mut fields = Vec::new();
    let mut checks = Vec::new();
    let mut body_params = Vec::new();
    let mut args = Vec::new();
    for q in params {
        let n = &q.name;
        fields.push(quote!(#n));
        let Some((kind, optional)) = param_type(&q.ty) else {
            checks.push(quote_spanned!(syn::spanned::Spanned::span(&q.ty)=>
                compile_error!("unsupported parameter type: use `Tensor`, `f64`, `i64`, `bool`, `Ints`, `String` or `DType`, or `Option<..>` of one for an optional part's binding");));
            continue;
        };
        let check_ty = field_type(kind);
        let check_ty = if optional {
            quote!(::core::option::Option<#check_ty>)
        } else {
            check_ty
        };
        let ty_span = syn::spanned::Spanned::span(&q.ty);
        let check_ty = quote_spanned!(ty_span=> #check_ty);
        checks.push(quote!(let #n: #check_ty = #n;));
        match kind {
            ParamKind::Tensor if optional => {
                body_params.push(quote!(#n: ::core::option::Option<#rt::Var<'__b>>));
                args.push(quote!(#n.map(|__v| __bld.var(__v))));
            }
            k if optional => {
                let t = field_type(k);
                body_params.push(quote!(#n: ::core::option::Option<#t>));
                args.push(quote!(#n));
            }
            ParamKind::Tensor => {
                body_params.push(quote!(#n: #rt::Var<'__b>));
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
            let vars = t.elems.iter().map(|_| quote!(#rt::Var<'__b>));
            (quote!((#(#vars),*)), t.elems.len())
        }
        _ => (quote!(#rt::Var<'__b>), 1),
    };
    let msg = format!(
        "replacement `{name}` returns {n_out} value(s) but its pattern has another number of outputs; make the return type match the pattern's"
    );
    let ret_span = syn::spanned::Spanned::span(ret);
    let out_check =
        quote_spanned!(ret_span=> const _: () = ::core::assert!(#target::OUTPUTS == #n_out, #msg););
    let (bparam, barg) = match builder {
        Some(b) => (quote!(#b: &'__b #rt::Builder,), quote!(__bld,)),
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
        <#target::Match as #rt::PatternMatch>::from_bindings(__m););
    quote! {
        #attrs
        #[allow(clippy::all)]
        #vis fn #name(
            __bld: &#rt::Builder,
            __m: &#rt::Bindings,
        ) -> ::core::result::Result<::std::vec::Vec<#rt::Value>, #rt::GraphError> {
            #missing_check
            #destructure
            #out_check
            #(#checks)*
            #[allow(unused_variables, unused_mut, unused_braces, clippy::all)]
            fn __body<'__b>(#bparam #(#body_params),*) -> ::core::result::Result<#ret_ty, #rt::GraphError> {
                ::core::result::Result::Ok(#body)
            }
            let __out = __body(#barg #(#args),*)?;
            ::core::result::Result::Ok(#rt::IntoOutputs::into_outputs(__out))
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

//! Expansion of the built-in op table ([`crate::vocab::BUILTIN_OPS`]) into `graphrw`.
//!
//! Three expansions, chosen by the macro's argument:
//! - `defs`: one `pub static NAME: OpDef` per op, `pub static BUILTIN: &[&OpDef]`, and
//!   the `Op` enum with one variant per op (what `OpDef::builtin` holds);
//! - `builder`: an `impl Builder` block with one method per op (`g.softmax(x, -1)`), and
//!   for an op with attribute defaults a short method that takes them (`g.gelu(x)`) beside
//!   `_with`, which takes every attribute (`g.gelu_with(x, "tanh")`);
//! - `var`: an `impl Var` block with one method per op whose first operand is a single
//!   tensor (`x.softmax(-1)`).

use proc_macro2::{Ident, Span, TokenStream};
use quote::{format_ident, quote};

use crate::vocab::{Arity, Attr, Class, DefaultValue, Kind, OpSpec, Outputs, BUILTIN_OPS};

/// Entry point of `__builtin_op_table!`.
pub fn expand(input: TokenStream) -> syn::Result<TokenStream> {
    let what: Ident = syn::parse2(input)?;
    match what.to_string().as_str() {
        "defs" => Ok(defs()),
        "builder" => Ok(builder_methods()),
        "var" => Ok(var_methods()),
        other => Err(syn::Error::new(
            what.span(),
            format!("expected `defs`, `builder` or `var`, found `{other}`"),
        )),
    }
}

/// The Rust name of an op's static (`scaled_dot_product_attention` -> `SCALED_DOT_PRODUCT_ATTENTION`).
pub fn static_ident(op: &str) -> Ident {
    Ident::new(&op.to_uppercase(), Span::call_site())
}

/// The Rust name of an op's variant in the `Op` enum (`scaled_dot_product_attention` ->
/// `ScaledDotProductAttention`).
pub fn variant_ident(op: &str) -> Ident {
    let camel: String = op
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect();
    Ident::new(&camel, Span::call_site())
}

/// The Rust name of an op's builder method (`where` is a keyword, so `where_`).
pub fn method_ident(op: &str) -> Ident {
    match op {
        "where" => format_ident!("where_"),
        _ => Ident::new(op, Span::call_site()),
    }
}

fn defs() -> TokenStream {
    let statics = BUILTIN_OPS.iter().map(op_static);
    let names: Vec<Ident> = BUILTIN_OPS.iter().map(|op| static_ident(op.name)).collect();
    let variants: Vec<Ident> = BUILTIN_OPS
        .iter()
        .map(|op| variant_ident(op.name))
        .collect();
    let docs = BUILTIN_OPS
        .iter()
        .map(|op| format!("`{}`: {}", op.name, op.doc));
    let op_names = BUILTIN_OPS.iter().map(|op| op.name);
    let grads = BUILTIN_OPS
        .iter()
        .map(|op| Ident::new(&format!("{:?}", op.grad), Span::call_site()));
    let unary_arms = BUILTIN_OPS.iter().filter_map(|op| {
        let u = graphrw_ops::UnaryOp::of_op(op.name)?;
        let (v, u) = (variant_ident(op.name), format_ident!("{u:?}"));
        Some(quote!(Op::#v => ::core::option::Option::Some(::graphrw_ops::UnaryOp::#u),))
    });
    let binary_arms = BUILTIN_OPS.iter().filter_map(|op| {
        let b = graphrw_ops::BinaryOp::of_op(op.name)?;
        let (v, b) = (variant_ident(op.name), format_ident!("{b:?}"));
        Some(quote!(Op::#v => ::core::option::Option::Some(::graphrw_ops::BinaryOp::#b),))
    });
    quote! {
        #(#statics)*
        /// Every built-in op, in table order.
        pub static BUILTIN: &[&crate::ops::OpDef] = &[#(&#names),*];

        /// The built-in ops, one variant per row of the op table, in table order.
        ///
        /// A node's op is [`OpDef::builtin`](crate::ops::OpDef::builtin) away (a field
        /// read, no string compare): `Some` for a built-in op, `None` for an op declared
        /// elsewhere. Executors, inference, the vjp rules and the ONNX mapping dispatch
        /// with an exhaustive `match` over it, so a new row in the table fails to compile
        /// wherever an arm is missing.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Op {
            #(#[doc = #docs] #variants,)*
        }

        impl Op {
            /// Every built-in op, in table order.
            pub const ALL: &'static [Op] = &[#(Op::#variants),*];

            /// The op's definition.
            pub fn def(self) -> &'static crate::ops::OpDef {
                match self {
                    #(Op::#variants => &#names,)*
                }
            }

            /// The unary elementwise op this is, if it is one (`gelu` gives the exact
            /// GELU; its `approximate` attribute picks the other).
            pub const fn unary(self) -> ::core::option::Option<::graphrw_ops::UnaryOp> {
                match self {
                    #(#unary_arms)*
                    _ => ::core::option::Option::None,
                }
            }

            /// The binary elementwise op this is, if it is one.
            pub const fn binary(self) -> ::core::option::Option<::graphrw_ops::BinaryOp> {
                match self {
                    #(#binary_arms)*
                    _ => ::core::option::Option::None,
                }
            }

            /// How the op is differentiated (its `grad` column in the op table).
            pub const fn grad(self) -> ::graphrw_ops::vocab::Grad {
                match self {
                    #(Op::#variants => ::graphrw_ops::vocab::Grad::#grads,)*
                }
            }

            /// The op's name (`matmul`, `scaled_dot_product_attention`).
            pub const fn name(self) -> &'static str {
                match self {
                    #(Op::#variants => #op_names,)*
                }
            }
        }

        impl ::std::fmt::Display for Op {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.name())
            }
        }
    }
}

fn op_static(op: &OpSpec) -> TokenStream {
    let ident = static_ident(op.name);
    let variant = variant_ident(op.name);
    let name = op.name;
    let doc = op.doc;
    let operands = op.operands.iter().map(|o| {
        let oname = o.name;
        let arity = match o.arity {
            Arity::Required => quote!(Required),
            Arity::Optional => quote!(Optional),
            Arity::Variadic => quote!(Variadic),
        };
        quote!(crate::ops::OperandSpec { name: #oname, arity: crate::ops::Arity::#arity })
    });
    let attrs = op.attrs.iter().map(attr_spec);
    let outputs = match op.outputs {
        Outputs::Fixed(n) => quote!(crate::ops::OutputCount::Fixed(#n)),
        Outputs::PerElementOf(a) => quote!(crate::ops::OutputCount::PerElementOf(#a)),
    };
    let commutative = op.commutative;
    let class = class_tokens(op.class);
    let infer = if op.infer == "declared" {
        quote!(crate::ops::Infer::Declared)
    } else {
        let f = Ident::new(op.infer, Span::call_site());
        quote!(crate::ops::Infer::Fn(crate::ops::infer::#f))
    };
    let decompose = match op.decompose {
        Some(f) => {
            let f = Ident::new(f, Span::call_site());
            quote!(Some(crate::ops::decompose::#f))
        }
        None => quote!(None),
    };
    quote! {
        #[doc = #doc]
        pub static #ident: crate::ops::OpDef = crate::ops::OpDef {
            name: #name,
            doc: #doc,
            operands: &[#(#operands),*],
            attrs: &[#(#attrs),*],
            outputs: #outputs,
            commutative: #commutative,
            class: #class,
            infer: #infer,
            decompose: #decompose,
            builtin: Some(Op::#variant),
        };
    }
}

fn class_tokens(class: Class) -> TokenStream {
    let c = format_ident!("{}", format!("{class:?}"));
    quote!(crate::ops::OpClass::#c)
}

fn kind_tokens(kind: Kind) -> TokenStream {
    let k = format_ident!("{}", format!("{kind:?}"));
    quote!(crate::ops::AttrKind::#k)
}

fn attr_spec(a: &Attr) -> TokenStream {
    let name = a.name;
    let kind = kind_tokens(a.kind);
    let default = match a.default {
        DefaultValue::Required => quote!(Required),
        DefaultValue::Null => quote!(Null),
        DefaultValue::Int(v) => quote!(Int(#v)),
        DefaultValue::Float(v) => quote!(Float(#v)),
        DefaultValue::Bool(v) => quote!(Bool(#v)),
        DefaultValue::Ints(v) => quote!(Ints(&[#(#v),*])),
        DefaultValue::Str(v) => quote!(Str(#v)),
        DefaultValue::DType(v) => {
            let d = dtype_variant(v);
            quote!(DType(crate::DType::#d))
        }
    };
    quote!(crate::ops::AttrSpec { name: #name, kind: #kind, default: crate::ops::AttrDefault::#default })
}

fn dtype_variant(name: &str) -> Ident {
    let variant = match name {
        "f32" => "F32",
        "f64" => "F64",
        "f16" => "F16",
        "bf16" => "BF16",
        "i64" => "I64",
        "i32" => "I32",
        "bool" => "Bool",
        other => panic!("vocab.rs: unknown dtype default `{other}`"),
    };
    Ident::new(variant, Span::call_site())
}

/// The Rust parameter type of an attribute in builder methods, and the expression that
/// turns the parameter into an `AttrValue`.
fn attr_param(a: &Attr) -> (TokenStream, TokenStream) {
    let p = format_ident!("{}", a.name);
    let optional = a.default == DefaultValue::Null;
    let (ty, conv) = match a.kind {
        Kind::Int => (quote!(i64), quote!(crate::ops::AttrValue::Int(v))),
        Kind::Float => (quote!(f64), quote!(crate::ops::AttrValue::Float(v))),
        Kind::Bool => (quote!(bool), quote!(crate::ops::AttrValue::Bool(v))),
        Kind::Ints => (
            quote!(&[i64]),
            quote!(crate::ops::AttrValue::Ints(v.to_vec())),
        ),
        Kind::Str => (
            quote!(&str),
            quote!(crate::ops::AttrValue::Str(v.to_string())),
        ),
        Kind::DType => (
            quote!(crate::DType),
            quote!(crate::ops::AttrValue::DType(v)),
        ),
    };
    if optional {
        (
            quote!(#p: Option<#ty>),
            quote!(match #p { Some(v) => #conv, None => crate::ops::AttrValue::Null }),
        )
    } else {
        (quote!(#p: #ty), quote!({ let v = #p; #conv }))
    }
}

fn attr_doc(op: &OpSpec) -> String {
    if op.attrs.is_empty() {
        return String::new();
    }
    let list: Vec<String> = op
        .attrs
        .iter()
        .map(|a| match a.default {
            DefaultValue::Required => format!("`{}`", a.name),
            DefaultValue::Null => format!("`{}` (None by default)", a.name),
            d => format!("`{}` (default {})", a.name, default_text(d)),
        })
        .collect();
    format!(" Attributes: {}.", list.join(", "))
}

fn default_text(d: DefaultValue) -> String {
    match d {
        DefaultValue::Int(v) => v.to_string(),
        DefaultValue::Float(v) => format!("{v:?}"),
        DefaultValue::Bool(v) => v.to_string(),
        DefaultValue::Ints(v) => format!("{v:?}"),
        DefaultValue::Str(v) => format!("{v:?}"),
        DefaultValue::DType(v) => v.to_string(),
        DefaultValue::Required | DefaultValue::Null => String::new(),
    }
}

fn is_buildable(op: &OpSpec) -> bool {
    !matches!(op.name, "input" | "constant")
}

/// Whether an op has an attribute with a default, so that it gets two builder methods:
/// the short one (`g.gelu(x)`, defaults taken, as a pattern's call does) and `_with`
/// (`g.gelu_with(x, "tanh")`, every attribute given).
fn has_defaults(op: &OpSpec) -> bool {
    op.attrs.iter().any(|a| a.default != DefaultValue::Required)
}

/// The name of an op's method that takes every attribute (`gelu_with`); the op's own
/// name when it has no attribute with a default.
fn method_with_ident(op: &OpSpec) -> Ident {
    if has_defaults(op) {
        format_ident!("{}_with", op.name)
    } else {
        method_ident(op.name)
    }
}

/// An attribute's default as the argument of the `_with` method (`None`, `-1`, `&[]`,
/// `"mean"`, `crate::DType::F32`); `None` for a required attribute.
fn default_arg(a: &Attr) -> Option<TokenStream> {
    Some(match a.default {
        DefaultValue::Required => return None,
        DefaultValue::Null => quote!(None),
        DefaultValue::Int(v) => quote!(#v),
        DefaultValue::Float(v) => quote!(#v),
        DefaultValue::Bool(v) => quote!(#v),
        DefaultValue::Ints(v) => quote!(&[#(#v),*]),
        DefaultValue::Str(v) => quote!(#v),
        DefaultValue::DType(v) => {
            let d = dtype_variant(v);
            quote!(crate::DType::#d)
        }
    })
}

/// `attrs` as text for a doc line: `approximate = "none"`.
fn defaults_doc(op: &OpSpec) -> String {
    op.attrs
        .iter()
        .filter(|a| a.default != DefaultValue::Required)
        .map(|a| match a.default {
            DefaultValue::Null => format!("`{}` = None", a.name),
            d => format!("`{}` = {}", a.name, default_text(d)),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn builder_methods() -> TokenStream {
    let methods = BUILTIN_OPS.iter().filter(|op| is_buildable(op)).map(|op| {
        let full = method_with_ident(op);
        let def = static_ident(op.name);
        let doc = format!("Adds `{}`: {}{}", op.name, op.doc, attr_doc(op));
        let mut params = Vec::new();
        let mut operand_names = Vec::new();
        let mut operand_exprs = Vec::new();
        for o in op.operands {
            let p = format_ident!("{}", o.name);
            operand_names.push(p.clone());
            match o.arity {
                Arity::Required => {
                    params.push(quote!(#p: impl Into<crate::Arg>));
                    operand_exprs.push(quote!(crate::builder::Slot::One(#p.into())));
                }
                Arity::Optional => {
                    params.push(quote!(#p: Option<crate::Value>));
                    operand_exprs.push(quote!(crate::builder::Slot::Opt(#p)));
                }
                Arity::Variadic => {
                    params.push(quote!(#p: &[crate::Value]));
                    operand_exprs.push(quote!(crate::builder::Slot::Many(#p.to_vec())));
                }
            }
        }
        let operand_params = params.clone();
        let mut attr_exprs = Vec::new();
        let mut short_params = Vec::new();
        let mut short_args = Vec::new();
        for a in op.attrs {
            let (param, conv) = attr_param(a);
            params.push(param.clone());
            attr_exprs.push(conv);
            match default_arg(a) {
                Some(d) => short_args.push(d),
                None => {
                    short_params.push(param);
                    let p = format_ident!("{}", a.name);
                    short_args.push(quote!(#p));
                }
            }
        }
        let (ret, call) = match op.outputs {
            Outputs::Fixed(1) => (quote!(crate::Value), quote!(apply_one)),
            _ => (quote!(Vec<crate::Value>), quote!(apply_many)),
        };
        let full_method = quote! {
            #[doc = #doc]
            #[allow(clippy::too_many_arguments)]
            pub fn #full(&self, #(#params),*) -> Result<#ret, crate::GraphError> {
                self.#call(
                    &crate::ops::builtin::#def,
                    vec![#(#operand_exprs),*],
                    vec![#(#attr_exprs),*],
                )
            }
        };
        if !has_defaults(op) {
            return full_method;
        }
        let short = method_ident(op.name);
        let short_doc = format!(
            "Adds `{}` with its attributes' defaults ({}), as a pattern's `{}(..)` does; \
             [`Self::{}`] gives every attribute. {}",
            op.name,
            defaults_doc(op),
            op.name,
            full,
            op.doc
        );
        quote! {
            #[doc = #short_doc]
            #[allow(clippy::too_many_arguments)]
            pub fn #short(&self, #(#operand_params,)* #(#short_params),*) -> Result<#ret, crate::GraphError> {
                self.#full(#(#operand_names,)* #(#short_args),*)
            }
            #full_method
        }
    });
    quote! {
        /// One method per built-in op (generated from the op table); an op with
        /// attribute defaults has a short method that takes them and a `_with` one that
        /// takes every attribute.
        impl crate::Builder {
            #(#methods)*
        }
    }
}

fn var_methods() -> TokenStream {
    let methods = BUILTIN_OPS
        .iter()
        .filter(|op| {
            op.operands
                .first()
                .is_some_and(|o| o.arity == Arity::Required)
        })
        .map(|op| {
            let method = method_ident(op.name);
            let doc = format!(
                "`{}` with this value as `{}`: {}{}",
                op.name,
                op.operands[0].name,
                op.doc,
                attr_doc(op)
            );
            let mut params = Vec::new();
            let mut args = vec![quote!(self)];
            for o in &op.operands[1..] {
                let p = format_ident!("{}", o.name);
                match o.arity {
                    Arity::Required => {
                        params.push(quote!(#p: impl Into<crate::Arg>));
                        args.push(quote!(#p));
                    }
                    Arity::Optional => {
                        params.push(quote!(#p: Option<crate::Var<'b>>));
                        args.push(quote!(#p.map(crate::Value::from)));
                    }
                    Arity::Variadic => {
                        params.push(quote!(#p: &[crate::Value]));
                        args.push(quote!(#p));
                    }
                }
            }
            let mut short_params = params.clone();
            let mut short_args = args.clone();
            for a in op.attrs {
                let (param, _) = attr_param(a);
                let p = format_ident!("{}", a.name);
                params.push(param.clone());
                args.push(quote!(#p));
                if a.default == DefaultValue::Required {
                    short_params.push(param);
                    short_args.push(quote!(#p));
                }
            }
            let full = method_with_ident(op);
            let full_method = var_method(&full, &doc, &params, &full, &args, op.outputs);
            if !has_defaults(op) {
                return full_method;
            }
            let short_doc = format!(
                "`{}` with this value as `{}` and the attributes' defaults ({}); \
                 [`Self::{}`] gives every attribute. {}",
                op.name,
                op.operands[0].name,
                defaults_doc(op),
                full,
                op.doc
            );
            let short = var_method(
                &method,
                &short_doc,
                &short_params,
                &method,
                &short_args,
                op.outputs,
            );
            quote!(#short #full_method)
        });
    quote! {
        /// One method per built-in op whose first operand is a tensor (generated from the op table).
        impl<'b> crate::Var<'b> {
            #(#methods)*
        }
    }
}

/// One `Var` method: `name(self, params) -> Var` calling the builder's `target(args)`.
fn var_method(
    name: &Ident,
    doc: &str,
    params: &[TokenStream],
    target: &Ident,
    args: &[TokenStream],
    outputs: Outputs,
) -> TokenStream {
    match outputs {
        Outputs::Fixed(1) => quote! {
            #[doc = #doc]
            #[allow(clippy::too_many_arguments)]
            pub fn #name(self, #(#params),*) -> Result<crate::Var<'b>, crate::GraphError> {
                let b = self.builder();
                b.#target(#(#args),*).map(|v| b.var(v))
            }
        },
        _ => quote! {
            #[doc = #doc]
            #[allow(clippy::too_many_arguments)]
            pub fn #name(self, #(#params),*) -> Result<Vec<crate::Var<'b>>, crate::GraphError> {
                let b = self.builder();
                b.#target(#(#args),*).map(|vs| vs.into_iter().map(|v| b.var(v)).collect())
            }
        },
    }
}

//! `fused_kernel!`: one elementwise (+ last-dimension reduction) expression, written in
//! the pattern syntax, becomes an op, its decomposition, the rule that fuses the
//! decomposed form, a CPU kernel, its CUDA source and (on request) its vjp kernels.
//!
//! Stages: `parse` (the pattern parser, shared) -> `ir` (the expression DAG, checked) ->
//! `eval` (alternatives must agree) -> `cpu` / `cuda` / `diff` (code) -> this file
//! (the op, the decomposition, the rule set through `rule_set!`).

mod cpu;
mod cuda;
mod decompose;
mod diff;
mod eval;
mod ir;
mod walk;

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::Meta;

use crate::pattern::parse::{PatternFn, PatternInput};

/// `fused_kernel! { fn .. }`.
pub fn expand(input: TokenStream) -> syn::Result<TokenStream> {
    let input: PatternInput = syn::parse2(input)?;
    let mut out = TokenStream::new();
    let mut errors: Option<syn::Error> = None;
    for f in &input.fns {
        match kernel_item(f) {
            Ok(t) => out.extend(t),
            Err(e) => {
                match &mut errors {
                    Some(all) => all.combine(e),
                    None => errors = Some(e),
                }
                let name = &f.name;
                let vis = &f.vis;
                out.extend(quote!(#[allow(dead_code)] #vis mod #name {}));
            }
        }
    }
    let errs = errors.map(|e| e.to_compile_error());
    let out = quote!(#out #errs);
    if std::env::var_os("GRAPHRW_DUMP_PATTERNS").is_some_and(|v| v != "0") {
        eprintln!("// ---- graphrw: code generated for fused_kernel! ----\n{out}\n");
    }
    Ok(out)
}

struct Attrs {
    op: Option<String>,
    matches: Vec<syn::Expr>,
    grad: Option<proc_macro2::Span>,
    docs: Vec<syn::Attribute>,
}

fn attrs(f: &PatternFn) -> syn::Result<Attrs> {
    let mut a = Attrs {
        op: None,
        matches: Vec::new(),
        grad: None,
        docs: Vec::new(),
    };
    for at in &f.attrs {
        let p = at.path();
        if p.is_ident("doc") {
            a.docs.push(at.clone());
        } else if p.is_ident("op") {
            match &at.meta {
                Meta::NameValue(nv) => match &nv.value {
                    syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(s),
                        ..
                    }) => a.op = Some(s.value()),
                    v => return Err(syn::Error::new_spanned(v, "write `#[op = \"my.op_name\"]`")),
                },
                _ => {
                    return Err(syn::Error::new_spanned(
                        at,
                        "write `#[op = \"my.op_name\"]`",
                    ))
                }
            }
        } else if p.is_ident("matches") {
            let e: syn::Expr = at.parse_args()?;
            a.matches.push(e);
        } else if p.is_ident("grad") {
            a.grad = Some(syn::spanned::Spanned::span(at));
        } else {
            return Err(syn::Error::new_spanned(
                at,
                "unknown attribute: a fused kernel takes `#[op = \"name\"]`, `#[matches(expr)]` (another decomposed form to fuse) and `#[grad]` (derive its vjp)",
            ));
        }
    }
    Ok(a)
}

/// The `graphrw::generated::CudaLaunch` of a launch shape.
fn launch_tokens(launch: cuda::Launch) -> TokenStream {
    match launch {
        cuda::Launch::Elementwise => quote!(graphrw::generated::CudaLaunch::Elementwise),
        cuda::Launch::Rows => quote!(graphrw::generated::CudaLaunch::Rows),
    }
}

fn kernel_item(f: &PatternFn) -> syn::Result<TokenStream> {
    let at = attrs(f)?;
    let k = ir::analyse(f)?;
    if let Some(i) = eval::alternatives_agree(&k.dag, &k.roots, k.tensors.len(), k.scalars.len()) {
        return Err(syn::Error::new_spanned(
            &f.body,
            format!("alternative {} of this body computes another function than the first: the alternatives of a fused kernel are other spellings of the same expression", i + 1),
        ));
    }
    let root = k.roots[0];
    let name = &f.name;
    let vis = &f.vis;
    let op_name = at.op.clone().unwrap_or_else(|| format!("fused.{name}"));
    let nt = k.tensors.len();
    let ns = k.scalars.len();
    let docs = &at.docs;
    let doc_text: String = at
        .docs
        .iter()
        .filter_map(|d| match &d.meta {
            Meta::NameValue(nv) => match &nv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => Some(s.value().trim().to_string()),
                _ => None,
            },
            _ => None,
        })
        .next()
        .unwrap_or_else(|| format!("Fused kernel `{name}`."));

    let tnames: Vec<String> = k.tensors.iter().map(|t| t.to_string()).collect();
    let snames: Vec<String> = k.scalars.iter().map(|t| t.to_string()).collect();
    let cpu = cpu::kernel(&k.dag, root, nt, ns, &op_name);
    let class = if cpu.has_reductions {
        quote!(graphrw::ops::OpClass::Normalization)
    } else if !cpu.rotate_inputs.is_empty() {
        // A permutation along the row: not elementwise.
        quote!(graphrw::ops::OpClass::Other)
    } else {
        quote!(graphrw::ops::OpClass::Elementwise)
    };

    // The vjp first: its errors are the user's.
    let vjp = match at.grad {
        Some(span) => {
            let items = |dag: &ir::Dag, gi: ir::Id, param: &str| {
                vjp_op_items(dag, gi, &op_name, param, &tnames, &snames, &class)
            };
            Some(diff::vjp(&k, root, span, &items)?)
        }
        None => None,
    };

    let (cuda_src, launch) = cuda::source(&k.dag, root, nt, &op_name, &name.to_string());
    let cpu_tokens = &cpu.tokens;
    let launch = launch_tokens(launch);
    let entry = name.to_string();
    let red_inputs = cpu.reduction_inputs.iter().map(|v| quote!(&[#(#v),*]));
    let rot_inputs = cpu.rotate_inputs.iter().map(|v| quote!(&[#(#v),*]));
    let decompose = decompose::decompose_fn(&k.dag, root, nt, &snames, &op_name, None);

    // The rule set: the body (and every `#[matches]` form) as patterns, each
    // `x.rotate_half()` written as the chain exporters emit (see `rotate_half_chain`).
    let mut rot = RotChains::default();
    let body = rot.block(&f.body);
    let matches: Vec<syn::Expr> = at.matches.iter().map(|m| rot.expr(m)).collect();
    let params = f.params.iter().map(|p| {
        let (n, t) = (&p.name, &p.ty);
        quote!(#n: #t)
    });
    let mut params: Vec<TokenStream> = params.collect();
    params.extend(rot.params.iter().cloned());
    let constraints = if rot.checks.is_empty() {
        quote!()
    } else {
        let c = &rot.checks;
        quote!(where #(#c),*)
    };
    let first = &k.tensors[0];
    let tvals = k.tensors.iter().map(|t| quote!(#t.value()));
    let svals = k.scalars.iter().map(|s| {
        let sn = s.to_string();
        quote!((#sn, graphrw::ops::AttrValue::Float(#s)))
    });
    let repl = quote! {{
        let __b = #first.builder();
        let __v = __b.apply(&super::OP, &[#(#tvals),*], &[#(#svals),*])?;
        __b.var(__v[0])
    }};
    let mut rules = quote! {
        rule #name(#(#params),*) -> Tensor #constraints #body => #repl
    };
    for (i, m) in matches.iter().enumerate() {
        let rn = format_ident!("{}_form{}", name, i + 2);
        rules.extend(quote! {
            #[overlap]
            rule #rn(#(#params),*) -> Tensor #constraints { #m } => #repl
        });
    }
    let rules_doc =
        format!("The rules that replace the decomposed forms of `{op_name}` by one node.");
    let vjp_tokens = match &vjp {
        Some(v) => {
            let items = &v.items;
            let list = &v.list;
            quote! {
                /// The vector-Jacobian product, derived symbolically at compile time: one
                /// fused kernel per tensor parameter, each taking the parameters and the
                /// output gradient `g` (last) and giving that parameter's gradient at the
                /// output's (broadcast) shape.
                pub mod vjp {
                    #items
                }
                /// The vjp kernels, one per tensor parameter in order.
                pub static VJP: &[graphrw::generated::VjpKernel] = &[#list];
                /// The vjp rule: one vjp op per parameter that needs a gradient.
                pub fn vjp_rule<'b>(
                    cx: &graphrw::grad::VjpContext<'b>,
                ) -> graphrw::grad::VjpResult<'b> {
                    graphrw::generated::vjp_nodes(cx, &KERNEL)
                }
                /// Registers [`vjp_rule`] as the gradient of [`OP`].
                pub fn register_grad(registry: &mut graphrw::grad::GradRegistry) {
                    registry.register(&OP, vjp_rule);
                }
            }
        }
        None => quote! {
            /// No vjp was asked for (`#[grad]`).
            pub static VJP: &[graphrw::generated::VjpKernel] = &[];
        },
    };
    let grad_rule = match &vjp {
        Some(_) => quote!(::core::option::Option::Some(vjp_rule)),
        None => quote!(::core::option::Option::None),
    };
    let span = name.span();
    let kernel_static = quote_spanned! {span=>
        /// Everything about this fused kernel, for executors and rule sets.
        pub static KERNEL: graphrw::generated::FusedKernel = graphrw::generated::FusedKernel {
            op: &OP,
            cpu,
            tensors: &[#(#tnames),*],
            scalars: &[#(#snames),*],
            reduction_inputs: &[#(#red_inputs),*],
            rotate_inputs: &[#(#rot_inputs),*],
            cuda: graphrw::generated::CudaSource { source: CUDA_SOURCE, entry: #entry, launch: #launch },
            rules: &RULES,
            vjp: VJP,
            grad: #grad_rule,
        };
    };
    Ok(quote! {
        #(#docs)*
        #[allow(clippy::all, clippy::pedantic, unused_parens)]
        #vis mod #name {
            #[doc = #doc_text]
            pub static OP: graphrw::ops::OpDef = graphrw::ops::OpDef {
                name: #op_name,
                doc: #doc_text,
                operands: &[#(graphrw::ops::OperandSpec { name: #tnames, arity: graphrw::ops::Arity::Required }),*],
                attrs: &[#(graphrw::ops::AttrSpec { name: #snames, kind: graphrw::ops::AttrKind::Float, default: graphrw::ops::AttrDefault::Required }),*],
                outputs: graphrw::ops::OutputCount::Fixed(1),
                commutative: false,
                class: #class,
                infer: graphrw::ops::Infer::Like,
                decompose: ::core::option::Option::Some(decompose),
                builtin: ::core::option::Option::None,
            };
            #decompose
            #cpu_tokens
            /// The CUDA C source of the kernel (see its header for the launch convention).
            pub const CUDA_SOURCE: &str = #cuda_src;
            #vjp_tokens
            graphrw::rule_set! {
                #[doc = #rules_doc]
                pub static RULES;
                #rules
            }
            #kernel_static
        }
    })
}

/// The items of one vjp op (in the parameter's `vjp` module): the op
/// `<op>.vjp_<param>` over the parameters then `g`, with the forward's attributes, and
/// its decomposition (the derived expression `gi`).
fn vjp_op_items(
    dag: &ir::Dag,
    gi: ir::Id,
    op_name: &str,
    param: &str,
    tnames: &[String],
    snames: &[String],
    class: &TokenStream,
) -> TokenStream {
    let nt = tnames.len();
    let vjp_name = format!("{op_name}.vjp_{param}");
    let doc = format!("The gradient of `{op_name}` with respect to `{param}`, at the output's (broadcast) shape; operands: the parameters, then the output gradient `g`.");
    let decompose = decompose::decompose_fn(dag, gi, nt + 1, snames, &vjp_name, Some(nt));
    quote! {
        #[doc = #doc]
        pub static OP: graphrw::ops::OpDef = graphrw::ops::OpDef {
            name: #vjp_name,
            doc: #doc,
            operands: &[#(graphrw::ops::OperandSpec { name: #tnames, arity: graphrw::ops::Arity::Required },)* graphrw::ops::OperandSpec { name: "g", arity: graphrw::ops::Arity::Required }],
            attrs: &[#(graphrw::ops::AttrSpec { name: #snames, kind: graphrw::ops::AttrKind::Float, default: graphrw::ops::AttrDefault::Required }),*],
            outputs: graphrw::ops::OutputCount::Fixed(1),
            commutative: false,
            class: #class,
            infer: graphrw::ops::Infer::Like,
            decompose: ::core::option::Option::Some(decompose),
            builtin: ::core::option::Option::None,
        };
        #decompose
    }
}

/// The patterns of `rotate_half`: `x.rotate_half()` (or `rotate_half(x)`, `x` a tensor
/// parameter, as `ir` checks) becomes the chain that exporters write,
/// `concat([neg(slice(x, hi..)), slice(x, 0..lo)], dim)`, with its attributes bound to
/// pattern parameters `__rot_<x>_*` and a `check` that they slice the halves of `x`'s
/// last dimension (`graphrw::generated::is_rotate_half`), whatever axis and bound
/// spellings (`-1` or `rank - 1`, `end = d` or `i64::MAX`) the exporter used.
#[derive(Default)]
struct RotChains {
    /// The rotated parameters seen so far.
    seen: Vec<String>,
    /// The pattern parameters (`name: i64`).
    params: Vec<TokenStream>,
    /// One `check(..)` per rotated parameter.
    checks: Vec<TokenStream>,
}

impl RotChains {
    fn block(&mut self, b: &syn::Block) -> syn::Block {
        let mut b = b.clone();
        for st in &mut b.stmts {
            match st {
                syn::Stmt::Local(l) => {
                    if let Some(init) = &mut l.init {
                        *init.expr = self.expr(&init.expr);
                    }
                }
                syn::Stmt::Expr(e, _) => *e = self.expr(e),
                _ => {}
            }
        }
        b
    }

    /// The parameter that `rotate_half` is applied to in `e`, if `e` is such a call.
    fn rotated(e: &syn::Expr) -> Option<syn::Ident> {
        let arg = match e {
            syn::Expr::MethodCall(m) if m.method == "rotate_half" && m.args.is_empty() => {
                &*m.receiver
            }
            syn::Expr::Call(c)
                if c.args.len() == 1
                    && matches!(&*c.func, syn::Expr::Path(p) if p.path.is_ident("rotate_half")) =>
            {
                &c.args[0]
            }
            _ => return None,
        };
        match arg {
            syn::Expr::Path(p) => p.path.get_ident().cloned(),
            _ => None,
        }
    }

    fn expr(&mut self, e: &syn::Expr) -> syn::Expr {
        if let Some(x) = Self::rotated(e) {
            return self.chain(&x);
        }
        let mut e = e.clone();
        match &mut e {
            syn::Expr::MethodCall(m) => {
                *m.receiver = self.expr(&m.receiver);
                for a in m.args.iter_mut() {
                    *a = self.expr(a);
                }
            }
            syn::Expr::Call(c) => {
                for a in c.args.iter_mut() {
                    *a = self.expr(a);
                }
            }
            syn::Expr::Binary(b) => {
                *b.left = self.expr(&b.left);
                *b.right = self.expr(&b.right);
            }
            syn::Expr::Unary(u) => *u.expr = self.expr(&u.expr),
            syn::Expr::Paren(p) => *p.expr = self.expr(&p.expr),
            syn::Expr::Group(g) => *g.expr = self.expr(&g.expr),
            syn::Expr::Array(a) => {
                for x in a.elems.iter_mut() {
                    *x = self.expr(x);
                }
            }
            syn::Expr::Assign(a) => *a.right = self.expr(&a.right),
            _ => {}
        }
        e
    }

    fn chain(&mut self, x: &syn::Ident) -> syn::Expr {
        let n = |what: &str| format_ident!("__rot_{}_{}", x, what);
        let (hi_dim, lo_dim, cat_dim) = (n("hi_dim"), n("lo_dim"), n("cat_dim"));
        let (hi_start, hi_end, lo_end) = (n("hi_start"), n("hi_end"), n("lo_end"));
        let name = x.to_string();
        if !self.seen.contains(&name) {
            self.seen.push(name);
            for p in [&hi_dim, &lo_dim, &cat_dim, &hi_start, &hi_end, &lo_end] {
                self.params.push(quote!(#p: i64));
            }
            self.checks.push(quote! {
                check(|#x, #hi_dim, #lo_dim, #cat_dim, #hi_start, #hi_end, #lo_end| {
                    graphrw::generated::is_rotate_half(#x, [#hi_dim, #lo_dim, #cat_dim], #hi_start, #hi_end, #lo_end)
                })
            });
        }
        syn::parse_quote! {
            concat(
                [
                    neg(slice(#x, dim = #hi_dim, start = #hi_start, end = #hi_end, step = 1)),
                    slice(#x, dim = #lo_dim, start = 0, end = #lo_end, step = 1)
                ],
                dim = #cat_dim
            )
        }
    }
}

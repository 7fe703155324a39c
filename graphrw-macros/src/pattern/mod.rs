//! `pattern!`, `replacement!` and `rule_set!`: one file per stage, strung together here.
//!
//! `parse` (syn) -> `analysis` (resolve ops and names, check, build the IR, `ir`) -> `lower` (anchors,
//! root links, op count) -> `codegen` (statics, typed match struct, functions);
//! `overlap` checks rule sets; `error` collects every error of an expansion. On errors the
//! macros still emit stub items with the same names, so one mistake does not cascade.

pub(crate) mod analysis;
mod codegen;
mod error;
pub(crate) mod ir;
mod lower;
mod overlap;
pub(crate) mod parse;
#[cfg(test)]
mod tests;

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::Meta;

use error::Errors;
use parse::{PatternFn, PatternInput, ReplacementFn, RuleSetInput};

/// `pattern! { fn .. }`.
pub fn expand_pattern(input: TokenStream) -> syn::Result<TokenStream> {
    let input: PatternInput = syn::parse2(input)?;
    let mut errs = Errors::default();
    let mut out = TokenStream::new();
    for f in &input.fns {
        out.extend(pattern_item(f, &mut errs, TokenStream::new()).0);
    }
    Ok(finish(out, errs, "pattern!"))
}

fn finish(out: TokenStream, mut errs: Errors, what: &str) -> TokenStream {
    let errors = errs.take().map(|e| e.to_compile_error());
    let out = quote!(#out #errors);
    codegen::dump(what, &out);
    out
}

/// One pattern module (or its stub) and its IR when it had no errors.
fn pattern_item(
    f: &PatternFn,
    errs: &mut Errors,
    extra: TokenStream,
) -> (TokenStream, Option<ir::Ir>) {
    let mut local = Errors::default();
    let ir = analysis::analyse(f, &mut local);
    let ok = local.is_empty();
    if let Some(e) = local.take() {
        errs.push(e);
    }
    match ir.filter(|_| ok) {
        Some(ir) => {
            let low = lower::lower(&ir);
            let items = codegen::pattern_module(f, &ir, &low, extra);
            (codegen::wrap_module(f, items), Some(ir))
        }
        None => (
            codegen::wrap_module(f, codegen::stub_module(f, extra)),
            None,
        ),
    }
}

/// `replacement! { fn name(..) -> Tensor for pattern { .. } }`.
pub fn expand_replacement(input: TokenStream) -> syn::Result<TokenStream> {
    let r: ReplacementFn = syn::parse2(input)?;
    let (builder, params): (Vec<_>, Vec<_>) = r.params.iter().partition(|q| is_builder(&q.ty));
    let params: Vec<parse::FnParam> = params
        .into_iter()
        .map(|q| parse::FnParam {
            name: q.name.clone(),
            ty: q.ty.clone(),
        })
        .collect();
    let target = &r.target;
    let attrs = codegen::doc_attrs(&r.attrs);
    let vis = &r.vis;
    let out = codegen::replacement_fn(
        attrs,
        quote!(#vis),
        &r.name,
        &params,
        builder.first().map(|q| &q.name),
        &r.ret,
        quote!(#target),
        &r.body,
    );
    codegen::dump("replacement!", &out);
    Ok(out)
}

fn is_builder(ty: &syn::Type) -> bool {
    matches!(ty, syn::Type::Reference(r) if matches!(&*r.elem, syn::Type::Path(p) if p.path.segments.last().is_some_and(|s| s.ident == "Builder")))
}

/// Rule attributes: `#[priority(N)]` / `#[priority = N]`, `#[overlap]`, `#[verify(..)]`.
struct RuleAttrs {
    priority: Option<i32>,
    overlap: bool,
    verify: Verify,
}

/// `#[verify(skip = "why", graphs = N, tol = x, generator = path)]`: how the rule's
/// differential test runs (`graphrw::selfcheck`).
#[derive(Default)]
struct Verify {
    skip: Option<syn::LitStr>,
    graphs: Option<syn::LitInt>,
    tol: Option<syn::LitFloat>,
    generator: Option<syn::Path>,
}

impl Verify {
    /// Reads one `#[verify(..)]` attribute into `self`.
    fn read(&mut self, a: &syn::Attribute) -> syn::Result<()> {
        a.parse_nested_meta(|m| {
            if m.path.is_ident("skip") {
                let why: syn::LitStr = m.value()?.parse()?;
                if why.value().trim().is_empty() {
                    return Err(m.error("say why the rule is not verified: `skip = \"why\"`"));
                }
                self.skip = Some(why);
            } else if m.path.is_ident("graphs") {
                let n: syn::LitInt = m.value()?.parse()?;
                n.base10_parse::<u32>()?;
                self.graphs = Some(n);
            } else if m.path.is_ident("tol") {
                self.tol = Some(m.value()?.parse()?);
            } else if m.path.is_ident("generator") {
                self.generator = Some(m.value()?.parse()?);
            } else {
                return Err(m.error(
                    "unknown `verify` argument: write `skip = \"why\"`, `graphs = N`, `tol = 1e-4` or `generator = path`",
                ));
            }
            Ok(())
        })
    }

    /// The `VerifySpec` expression.
    fn spec(&self) -> TokenStream {
        let opt = |t: Option<TokenStream>| match t {
            Some(t) => quote!(::core::option::Option::Some(#t)),
            None => quote!(::core::option::Option::None),
        };
        let skip = opt(self.skip.as_ref().map(|s| quote!(#s)));
        let graphs = opt(self.graphs.as_ref().map(|n| quote!(#n)));
        let tol = opt(self.tol.as_ref().map(|t| quote!(#t)));
        // The rule's module is one level down from where the path was written.
        let generator = opt(self.generator.as_ref().map(|p| {
            if p.leading_colon.is_some() || p.segments.first().is_some_and(|s| s.ident == "crate") {
                quote!(#p)
            } else {
                quote!(super::#p)
            }
        }));
        quote! {
            graphrw::__private::VerifySpec {
                skip: #skip,
                graphs: #graphs,
                tol: #tol,
                generator: #generator,
            }
        }
    }
}

fn rule_attrs(f: &PatternFn, errs: &mut Errors) -> RuleAttrs {
    let mut out = RuleAttrs {
        priority: None,
        overlap: false,
        verify: Verify::default(),
    };
    for a in &f.attrs {
        if a.path().is_ident("verify") {
            if let Err(e) = out.verify.read(a) {
                errs.push(e);
            }
        } else if a.path().is_ident("overlap") {
            out.overlap = true;
        } else if a.path().is_ident("priority") {
            let lit: Option<syn::Expr> = match &a.meta {
                Meta::List(l) => l.parse_args().ok(),
                Meta::NameValue(nv) => Some(nv.value.clone()),
                Meta::Path(_) => None,
            };
            match lit.as_ref().and_then(analysis::literal) {
                Some(ir::Lit::Int(v)) => out.priority = Some(v as i32),
                _ => errs.spanned(a, "write `#[priority(N)]` with an integer `N`"),
            }
        } else if !a.path().is_ident("doc") {
            errs.spanned(
                a,
                "unknown rule attribute: rules take `#[priority(N)]`, `#[overlap]` and `#[verify(..)]`",
            );
        }
    }
    out
}

/// `rule_set! { pub static NAME; rule ..(..) -> Tensor { .. } => { .. } .. }`.
pub fn expand_rule_set(input: TokenStream) -> syn::Result<TokenStream> {
    let set: RuleSetInput = syn::parse2(input)?;
    let mut errs = Errors::default();
    let mut out = TokenStream::new();
    // `#[verify(skip = "why")]` on the set: every rule of it not verified, for that
    // reason (fixtures of tests that are wrong on purpose).
    let mut set_verify = Verify::default();
    for a in set.attrs.iter().filter(|a| a.path().is_ident("verify")) {
        if let Err(e) = set_verify.read(a) {
            errs.push(e);
        }
    }
    struct Checked {
        name: syn::Ident,
        ir: ir::Ir,
        priority: i32,
        overlap: bool,
    }
    let mut checked = Vec::new();
    let mut all_ok = true;
    for r in &set.rules {
        let f = &r.pattern;
        let mut attrs = rule_attrs(f, &mut errs);
        if attrs.verify.skip.is_none() {
            attrs.verify.skip = set_verify.skip.clone();
        }
        let builder = format_ident!("b");
        let has_b = f.params.iter().any(|q| q.name == "b");
        let replace = codegen::replacement_fn(
            quote!(#[doc = "The rule's replacement."]),
            quote!(pub),
            &format_ident!("replace"),
            &f.params,
            (!has_b).then_some(&builder),
            &f.ret,
            quote!(self),
            &r.replacement,
        );
        let name_str = f.name.to_string();
        let priority = attrs.priority;
        let rule_doc = format!("Rule `{name_str}`.");
        let prio = match priority {
            Some(p) => quote!(.with_priority(#p)),
            None => quote!(),
        };
        let spec = attrs.verify.spec();
        // The differential test, in the crate's own `cfg(test)` only; none for a rule
        // marked `skip` (its reason stays in `RULE.verify`). A `rule_set!` inside a
        // function body gets a test the harness cannot reach (rustc's
        // `unnameable_test_items`), so none runs there: `selfcheck::check_rule` does.
        let test_name = format_ident!("verify_{}", f.name);
        let test = attrs.verify.skip.is_none().then(|| {
            quote! {
                #[cfg(test)]
                #[test]
                #[allow(unnameable_test_items)]
                fn #test_name() {
                    graphrw::__private::test_rule(&RULE);
                }
            }
        });
        let rule = quote! {
            #replace
            #[doc = #rule_doc]
            pub static RULE: graphrw::__private::Rule =
                graphrw::__private::Rule::new(#name_str, &PATTERN, replace) #prio
                    .with_verify(#spec);
            #test
        };
        let (items, ir) = pattern_item(f, &mut errs, rule);
        out.extend(items);
        match ir {
            Some(ir) => {
                let priority = priority.unwrap_or(lower::lower(&ir).op_count as i32);
                checked.push(Checked {
                    name: f.name.clone(),
                    ir,
                    priority,
                    overlap: attrs.overlap,
                })
            }
            None => all_ok = false,
        }
    }
    // Order: priority descending, then declaration order (a stable sort).
    let mut order: Vec<usize> = (0..checked.len()).collect();
    order.sort_by_key(|&i| -checked[i].priority);
    if all_ok {
        for (pos, &i) in order.iter().enumerate() {
            for &j in &order[pos + 1..] {
                let (a, b) = (&checked[i], &checked[j]);
                if overlap::subsumes(&a.ir, &b.ir) {
                    let mut e = syn::Error::new(
                        b.name.span(),
                        format!(
                            "rule `{}` can never fire: rule `{}` (priority {}) matches everything it matches and is tried first (priority {} >= {}); give `{}` a higher priority with `#[priority(N)]`, or remove it",
                            b.name, a.name, a.priority, a.priority, b.priority, b.name
                        ),
                    );
                    e.combine(syn::Error::new(
                        a.name.span(),
                        format!(
                            "rule `{}` shadows rule `{}` (declared here)",
                            a.name, b.name
                        ),
                    ));
                    errs.push(e);
                } else if a.priority == b.priority
                    && !a.overlap
                    && !b.overlap
                    && overlap::overlaps(&a.ir, &b.ir)
                {
                    let mut e = syn::Error::new(
                        b.name.span(),
                        format!(
                            "rules `{}` and `{}` overlap at equal priority {}: some node can match both, and which fires would depend on declaration order; give one a higher priority with `#[priority(N)]`, or mark one `#[overlap]` if the order is intended",
                            a.name, b.name, a.priority
                        ),
                    );
                    e.combine(syn::Error::new(
                        a.name.span(),
                        format!(
                            "rule `{}` overlaps rule `{}` (declared here)",
                            a.name, b.name
                        ),
                    ));
                    errs.push(e);
                }
            }
        }
    }
    let names: Vec<&syn::Ident> = order.iter().map(|&i| &checked[i].name).collect();
    let vis = &set.vis;
    let name = &set.name;
    let name_str = name.to_string();
    let docs = codegen::doc_attrs(&set.attrs);
    let rules = if all_ok && errs.is_empty() {
        quote!(&[#(&#names::RULE),*])
    } else {
        quote!(&[])
    };
    out.extend(quote! {
        #docs
        #vis static #name: graphrw::__private::RuleSet = graphrw::__private::RuleSet {
            name: #name_str,
            rules: #rules,
        };
    });
    Ok(finish(out, errs, "rule_set!"))
}

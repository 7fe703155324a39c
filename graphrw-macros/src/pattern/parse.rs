//! Parsing (syn): pattern functions, replacement functions and rule sets.
//!
//! ```text
//! pattern!     := pattern_fn+
//! pattern_fn   := attrs vis `fn` name `(` (param `,`)* `)` `->` ret (`where` constraint,*)? block
//! param        := name `:` type
//! replacement! := attrs vis `fn` name `(` params `)` `->` ret `for` path block
//! rule_set!    := attrs vis `static` NAME `;` rule*
//! rule         := attrs `rule` name `(` params `)` `->` ret (`where` ..)? block `=>` block
//! ```
//! Bodies stay `syn` expressions; `sema` gives them meaning.

use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Attribute, Block, Expr, Ident, Path, Token, Type, Visibility};

syn::custom_keyword!(rule);

/// `name: Type`.
pub struct FnParam {
    pub name: Ident,
    pub ty: Type,
}

impl Parse for FnParam {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let name: Ident = input.parse()?;
        input.parse::<Token![:]>()?;
        let ty: Type = input.parse()?;
        Ok(FnParam { name, ty })
    }
}

/// A pattern function.
pub struct PatternFn {
    pub attrs: Vec<Attribute>,
    pub vis: Visibility,
    pub name: Ident,
    pub params: Vec<FnParam>,
    pub ret: Type,
    pub constraints: Vec<Expr>,
    pub body: Block,
}

fn parse_params(input: ParseStream) -> syn::Result<Vec<FnParam>> {
    let content;
    syn::parenthesized!(content in input);
    let list = Punctuated::<FnParam, Token![,]>::parse_terminated(&content)?;
    Ok(list.into_iter().collect())
}

fn parse_ret(input: ParseStream, name: &Ident) -> syn::Result<Type> {
    if !input.peek(Token![->]) {
        return Err(syn::Error::new(
            name.span(),
            format!("`{name}` needs a return type: add `-> Tensor` (or `-> (Tensor, Tensor)` for several outputs)"),
        ));
    }
    input.parse::<Token![->]>()?;
    Type::without_plus(input)
}

fn parse_where(input: ParseStream) -> syn::Result<Vec<Expr>> {
    let mut out = Vec::new();
    if input.parse::<Option<Token![where]>>()?.is_some() {
        while !input.peek(syn::token::Brace) {
            out.push(Expr::parse_without_eager_brace(input)?);
            if input.parse::<Option<Token![,]>>()?.is_none() {
                break;
            }
        }
    }
    Ok(out)
}

impl PatternFn {
    fn parse_rest(
        attrs: Vec<Attribute>,
        vis: Visibility,
        input: ParseStream,
    ) -> syn::Result<PatternFn> {
        let name: Ident = input.parse()?;
        let params = parse_params(input)?;
        let ret = parse_ret(input, &name)?;
        let constraints = parse_where(input)?;
        let body: Block = input.parse()?;
        Ok(PatternFn {
            attrs,
            vis,
            name,
            params,
            ret,
            constraints,
            body,
        })
    }
}

/// The input of `pattern!`: one or more pattern functions.
pub struct PatternInput {
    pub fns: Vec<PatternFn>,
}

impl Parse for PatternInput {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut fns = Vec::new();
        while !input.is_empty() {
            let attrs = input.call(Attribute::parse_outer)?;
            let vis: Visibility = input.parse()?;
            input.parse::<Token![fn]>()?;
            fns.push(PatternFn::parse_rest(attrs, vis, input)?);
        }
        Ok(PatternInput { fns })
    }
}

/// The input of `replacement!`.
pub struct ReplacementFn {
    pub attrs: Vec<Attribute>,
    pub vis: Visibility,
    pub name: Ident,
    pub params: Vec<FnParam>,
    pub ret: Type,
    pub target: Path,
    pub body: Block,
}

impl Parse for ReplacementFn {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        input.parse::<Token![fn]>()?;
        let name: Ident = input.parse()?;
        let params = parse_params(input)?;
        let ret = parse_ret(input, &name)?;
        if !input.peek(Token![for]) {
            return Err(input.error(
                "expected `for pattern_name`: a replacement names the pattern it replaces, e.g. `fn fused(..) -> Tensor for sfdp_1 { .. }`",
            ));
        }
        input.parse::<Token![for]>()?;
        let target: Path = input.parse()?;
        let body: Block = input.parse()?;
        Ok(ReplacementFn {
            attrs,
            vis,
            name,
            params,
            ret,
            target,
            body,
        })
    }
}

/// One rule of a rule set: a pattern and its replacement body.
pub struct RuleDef {
    pub pattern: PatternFn,
    pub replacement: Block,
}

/// The input of `rule_set!`.
pub struct RuleSetInput {
    pub attrs: Vec<Attribute>,
    pub vis: Visibility,
    pub name: Ident,
    pub rules: Vec<RuleDef>,
}

impl Parse for RuleSetInput {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        input.parse::<Token![static]>()?;
        let name: Ident = input.parse()?;
        input.parse::<Token![;]>()?;
        let mut rules = Vec::new();
        while !input.is_empty() {
            let attrs = input.call(Attribute::parse_outer)?;
            let vis: Visibility = input.parse()?;
            input.parse::<rule>()?;
            let pattern = PatternFn::parse_rest(attrs, vis, input)?;
            input.parse::<Token![=>]>()?;
            let replacement: Block = input.parse()?;
            rules.push(RuleDef {
                pattern,
                replacement,
            });
        }
        Ok(RuleSetInput {
            attrs,
            vis,
            name,
            rules,
        })
    }
}

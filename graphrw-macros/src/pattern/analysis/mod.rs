//! Semantic analysis: resolves a parsed pattern function against the op vocabulary and
//! its own parameters, and builds the pattern's intermediate form ([`Ir`]).
//!
//! Checks: op names (with "did you mean"), operand counts, attribute names and kinds,
//! parameter kinds, duplicate and unused parameters, alternatives binding the same
//! parameters, `where` names, and what syntax is supported. Every error is collected.
//!
//! One pass, [`analyse`], over a shared state ([`Sema`]) whose methods live by job:
//! `expr` (tensor expressions and names), `call` (op calls against the op table and user
//! ops), `optional` (optional parts and `repeat`), `constraint` (`where` clauses), and
//! `lit` (literals, defaults and signature text).

mod call;
mod constraint;
mod expr;
mod lit;
mod optional;

use lit::*;
pub use lit::{literal, signature, tidy};

use std::collections::{BTreeSet, HashMap};

use quote::ToTokens;
use syn::{BinOp, Expr, Ident, Lit as SynLit, Pat, Path, Stmt, Type, UnOp};

use super::error::{article, hint, Errors};
use super::ir::{
    dtype_alias, kind_of_type, param_type, AttrCheck, AttrKey, AttrPattern, Check, Cmp, Constraint,
    Ir, Lit, Node, OpNode, OpRef, Param, ParamKind, Term, DTYPES,
};
use super::parse::PatternFn;
use crate::vocab::{self, Arity, DefaultValue, Kind, OpSpec, BUILTIN_OPS};

/// What a pattern body may contain (quoted by "unsupported syntax" errors).
pub const SUPPORTED: &str = "a pattern body is `let name = ..;` bindings and one final expression of op calls (`x.op(..)` or `op(x, ..)`), parameters, `_`, number literals, `a | b` alternatives and `repeat(x, |t| .., min..=max)`";

/// Analyses one pattern function; errors go to `errs`. Returns `None` when the pattern
/// is too broken to lower.
pub fn analyse(f: &PatternFn, errs: &mut Errors) -> Option<Ir> {
    let before = errs.is_empty();
    let errors_before = errs.count();
    let mut s = Sema {
        errs,
        params: Vec::new(),
        uses: Vec::new(),
        lets: HashMap::new(),
        nodes: Vec::new(),
        next_slot: 0,
        hole: None,
        optionals: HashMap::new(),
    };
    // Parameters.
    for p in &f.params {
        if s.params.iter().any(|q| q.name == p.name) {
            s.errs.spanned(
                &p.name,
                format!("duplicate parameter `{}`: each parameter of a pattern needs its own name (the same name used twice in the body already means the same value)", p.name),
            );
            continue;
        }
        let ty = param_type(&p.ty);
        if ty.is_none() {
            s.errs.spanned(
                &p.ty,
                "unsupported parameter type: a pattern parameter is `Tensor`, `f64`, `i64`, `bool`, `Ints`, `String` or `DType`, or `Option<..>` of one for a binding of an optional part",
            );
        }
        s.params.push(Param {
            name: p.name.clone(),
            kind: ty.map(|t| t.0),
            optional: ty.is_some_and(|t| t.1),
            ty: p.ty.clone(),
        });
    }
    s.uses = vec![0; s.params.len()];
    s.next_slot = s.params.len();
    // Return type.
    let ret_count = match &f.ret {
        Type::Tuple(t) if t.elems.iter().all(is_tensor_type) && t.elems.len() >= 2 => {
            Some(t.elems.len())
        }
        t if is_tensor_type(t) => Some(1),
        t => {
            s.errs.spanned(
                t,
                "a pattern returns `Tensor`, or a tuple of them (`(Tensor, Tensor)`) for several outputs",
            );
            None
        }
    };
    // Body.
    let mut roots = Vec::new();
    let stmts = &f.body.stmts;
    if stmts.is_empty() {
        s.errs.at(
            f.body.brace_token.span.join(),
            format!("empty pattern body: write the expression to match, e.g. `{}` (the value it computes is the pattern's output)", example(&s.params)),
        );
    }
    for (i, stmt) in stmts.iter().enumerate() {
        let last = i + 1 == stmts.len();
        match stmt {
            Stmt::Local(local) => s.local(local),
            Stmt::Expr(e, None) if last => {
                let exprs: Vec<&Expr> = match e {
                    Expr::Tuple(t) => t.elems.iter().collect(),
                    e => vec![e],
                };
                for e in exprs {
                    let before = s.errs.count();
                    let n = s.tensor(e);
                    if let Some(&span) = s.optionals.get(&n) {
                        s.errs.at(
                            span,
                            "the pattern's result cannot be optional: it is the anchor every match starts from; make the step before it optional instead, or write the result without `?`/`opt`",
                        );
                    } else if before == s.errs.count() && s.is_bare(n) {
                        s.errs.spanned(
                            e,
                            "this pattern is only a bare wildcard and would match every value; its result must be an op call, e.g. `x.relu()`",
                        );
                    }
                    roots.push(n);
                }
                if let Some(n) = ret_count {
                    if n != roots.len() && !roots.is_empty() {
                        s.errs.spanned(
                            &f.ret,
                            format!(
                                "the return type says {n} output(s) but the body returns {}",
                                roots.len()
                            ),
                        );
                    }
                }
            }
            Stmt::Expr(e, _) => {
                let before = s.errs.is_empty();
                s.tensor(e);
                if before == s.errs.is_empty() {
                    s.errs.spanned(
                        stmt,
                        format!("only the last expression (without `;`) is the pattern's result; {SUPPORTED}"),
                    );
                }
            }
            Stmt::Macro(m) => s.errs.spanned(
                &m.mac,
                format!("macro calls are not supported in patterns; {SUPPORTED}"),
            ),
            Stmt::Item(item) => s.errs.spanned(
                item,
                format!("items are not supported in pattern bodies; {SUPPORTED}"),
            ),
        }
    }
    if !stmts.is_empty() && roots.is_empty() && s.errs.is_empty() {
        s.errs.at(
            f.body.brace_token.span.join(),
            "the pattern body ends without a result: end it with the expression to match (no `;`)",
        );
    }
    // Unused parameters, only in a body without errors: an error (a call with too many
    // arguments, an empty body) leaves parameters unvisited, and "never used" would
    // then be a second, misleading error about the same mistake.
    let body_ok = s.errs.count() == errors_before;
    for (i, p) in s.params.iter().enumerate() {
        if body_ok && s.uses[i] == 0 {
            s.errs.spanned(
                &p.name,
                format!("parameter `{}` is never used in the pattern body; use it or remove it (parameters are bound by matching, so each must appear in the body)", p.name),
            );
        }
    }
    s.check_optionals(&roots);
    // Constraints.
    let mut constraints = Vec::new();
    for c in &f.constraints {
        if let Some(c) = s.constraint(c) {
            constraints.push(c);
        }
    }
    if !before || !s.errs.is_empty() {
        return None;
    }
    Some(Ir {
        slots: s.next_slot,
        params: s.params,
        nodes: s.nodes,
        roots,
        constraints,
    })
}

fn is_tensor_type(t: &Type) -> bool {
    matches!(kind_of_type(t), Some(ParamKind::Tensor))
}

fn example(params: &[Param]) -> String {
    match params.iter().find(|p| p.kind == Some(ParamKind::Tensor)) {
        Some(p) => format!("{}.relu()", p.name),
        None => "x.relu()".into(),
    }
}

struct Sema<'a> {
    errs: &'a mut Errors,
    params: Vec<Param>,
    uses: Vec<usize>,
    lets: HashMap<String, usize>,
    nodes: Vec<Node>,
    next_slot: usize,
    /// The closure parameter of the `repeat` being analysed, its node, and its uses.
    hole: Option<(String, usize, usize)>,
    /// The alternatives made by optional parts (`present | absent`), with the span of
    /// their `?` or `opt`.
    optionals: HashMap<usize, proc_macro2::Span>,
}

enum Arg<'e> {
    Expr(&'e Expr),
}
impl Sema<'_> {
    fn push(&mut self, n: Node) -> usize {
        self.nodes.push(n);
        self.nodes.len() - 1
    }

    /// The parameters bound in every match (all but the `Option<..>` ones): what a
    /// constraint that names no binding waits for.
    fn required_params(&self) -> Vec<usize> {
        (0..self.params.len())
            .filter(|&i| !self.params[i].optional)
            .collect()
    }

    fn param(&self, name: &str) -> Option<usize> {
        self.params.iter().position(|p| p.name == name)
    }

    fn names(&self) -> Vec<String> {
        self.params
            .iter()
            .map(|p| p.name.to_string())
            .chain(self.lets.keys().cloned())
            .collect()
    }

    fn is_bare(&self, n: usize) -> bool {
        match &self.nodes[n] {
            Node::Op(_) => false,
            Node::Alt(bs) => bs.iter().any(|&b| self.is_bare(b)),
            Node::Repeat {
                body, base, min, ..
            } => self.is_bare(*body) || (*min == 0 && self.is_bare(*base)),
            _ => true,
        }
    }

    fn local(&mut self, local: &syn::Local) {
        let pat = match &local.pat {
            Pat::Type(t) => &*t.pat,
            p => p,
        };
        let Pat::Ident(pi) = pat else {
            self.errs.spanned(
                &local.pat,
                "only `let name = ..;` is supported in patterns (no destructuring)",
            );
            return;
        };
        if let Some(m) = &pi.mutability {
            self.errs.spanned(
                m,
                "`let mut` is not supported: a `let` in a pattern names a sub-pattern, which cannot change; write `let name = ..;`",
            );
        }
        let Some(init) = &local.init else {
            self.errs.spanned(
                local,
                "a `let` in a pattern needs a value: `let name = ..;`",
            );
            return;
        };
        let name = pi.ident.to_string();
        if self.param(&name).is_some() {
            self.errs.spanned(
                &pi.ident,
                format!("`let {name}` shadows the parameter `{name}`; pick another name"),
            );
        }
        let n = self.tensor(&init.expr);
        self.lets.insert(name, n);
    }

    fn unsupported(&mut self, e: &Expr, what: &str) -> usize {
        self.errs.spanned(
            e,
            format!("{what} are not supported in patterns; {SUPPORTED}"),
        );
        self.push(Node::Any)
    }
}

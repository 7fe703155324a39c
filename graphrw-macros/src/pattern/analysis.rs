//! Semantic analysis: resolves a parsed pattern function against the op vocabulary and
//! its own parameters, and builds the pattern's intermediate form ([`Ir`]).
//!
//! Checks: op names (with "did you mean"), operand counts, attribute names and kinds,
//! parameter kinds, duplicate and unused parameters, alternatives binding the same
//! parameters, `where` names, and what syntax is supported. Every error is collected.

use std::collections::{BTreeSet, HashMap};

use quote::ToTokens;
use syn::{BinOp, Expr, Ident, Lit as SynLit, Pat, Path, Stmt, Type, UnOp};

use super::error::{article, hint, Errors};
use super::ir::{
    param_type, AttrCheck, AttrKey, AttrPattern, Check, Cmp, Constraint, Ir, Lit, Node, OpNode,
    OpRef, Param, ParamKind, Term, DTYPES,
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
    matches!(ParamKind::from_type(t), Some(ParamKind::Tensor))
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

    /// A pattern for a tensor operand.
    fn tensor(&mut self, e: &Expr) -> usize {
        match e {
            Expr::Infer(_) => self.push(Node::Any),
            Expr::Paren(p) => self.tensor(&p.expr),
            Expr::Group(g) => self.tensor(&g.expr),
            Expr::Path(p) if p.path.get_ident().is_some() && p.qself.is_none() => {
                let id = p.path.get_ident().expect("checked");
                self.name(id)
            }
            Expr::Lit(l) => match number(&l.lit) {
                Some(v) => self.push(Node::ConstValue(v)),
                None => {
                    self.errs.spanned(
                        e,
                        "only number literals can stand for tensor operands (they match a constant node holding that number)",
                    );
                    self.push(Node::Any)
                }
            },
            Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) => match &*u.expr {
                Expr::Lit(l) if number(&l.lit).is_some() => {
                    self.push(Node::ConstValue(-number(&l.lit).expect("checked")))
                }
                _ => {
                    self.errs
                        .spanned(e, "unary `-` is not supported on tensors; write `x.neg()`");
                    self.push(Node::Any)
                }
            },
            Expr::MethodCall(m) => {
                if let Some(t) = &m.turbofish {
                    self.errs
                        .spanned(t, "turbofish is not supported in patterns");
                }
                let args: Vec<&Expr> = std::iter::once(&*m.receiver).chain(m.args.iter()).collect();
                self.builtin_call(&m.method, args)
            }
            Expr::Call(c) => {
                let Expr::Path(fp) = &*c.func else {
                    return self.unsupported(e, "calls of computed functions");
                };
                let args: Vec<&Expr> = c.args.iter().collect();
                match fp.path.get_ident() {
                    Some(id) if id == "repeat" => self.repeat(id, &args, e),
                    Some(id) if id == "opt" => self.optional_step(id, &args, e),
                    Some(id) if !is_upper(&id.to_string()) => self.builtin_call(id, args),
                    _ => self.user_call(&fp.path, args),
                }
            }
            Expr::Binary(b) => match b.op {
                BinOp::BitOr(_) => {
                    let mut branches = Vec::new();
                    flatten_or(e, &mut branches);
                    let nodes: Vec<usize> = branches.iter().map(|b| self.tensor(b)).collect();
                    let sets: Vec<BTreeSet<usize>> =
                        nodes.iter().map(|&n| self.params_in(n)).collect();
                    for (i, set) in sets.iter().enumerate().skip(1) {
                        if *set != sets[0] {
                            let diff: Vec<String> = set
                                .symmetric_difference(&sets[0])
                                .map(|&p| format!("`{}`", self.params[p].name))
                                .collect();
                            self.errs.spanned(
                                branches[i],
                                format!("alternative branches must bind the same parameters: this branch and the first differ in {}; a parameter bound in one branch only would be unset when the other matches", diff.join(", ")),
                            );
                        }
                    }
                    self.push(Node::Alt(nodes))
                }
                op => {
                    let hint = match op {
                        BinOp::Add(_) => "; write `a.add(b)`",
                        BinOp::Sub(_) => "; write `a.sub(b)`",
                        BinOp::Mul(_) => "; write `a.mul(b)`",
                        BinOp::Div(_) => "; write `a.div(b)`",
                        _ => "",
                    };
                    self.errs.spanned(
                        e,
                        format!("operators are not supported in patterns{hint}; {SUPPORTED}"),
                    );
                    self.push(Node::Any)
                }
            },
            Expr::Try(t) => {
                self.errs.spanned(
                    &t.question_token,
                    "`?` marks an optional operand of an op call (`x.mul(s?)`: the `mul` is there or not); for an optional step of several ops write `opt(x, |t| ..)`",
                );
                self.tensor(&t.expr)
            }
            Expr::Closure(_) => self.unsupported(
                e,
                "closures (outside `repeat(x, |t| .., n..=m)` and `check(|..| ..)`)",
            ),
            Expr::Macro(_) => self.unsupported(e, "macro calls"),
            Expr::ForLoop(_) | Expr::While(_) | Expr::Loop(_) => self.unsupported(
                e,
                "loops (use `repeat(x, |t| .., min..=max)` for a repeated chain)",
            ),
            Expr::If(_) | Expr::Match(_) => {
                self.unsupported(e, "`if` and `match` (use `a | b` alternatives)")
            }
            Expr::Tuple(_) => self.unsupported(
                e,
                "tuples (except as the whole result, for several outputs)",
            ),
            Expr::Field(_) => self.unsupported(e, "field and output projections (`.0`)"),
            Expr::Block(_) | Expr::Unsafe(_) => self.unsupported(e, "blocks"),
            Expr::Assign(_) => self.unsupported(
                e,
                "assignments (keyword arguments go inside a call: `softmax(x, dim = -1)`)",
            ),
            _ => self.unsupported(e, "expressions of this kind"),
        }
    }

    fn name(&mut self, id: &Ident) -> usize {
        let name = id.to_string();
        if let Some((h, rep, uses)) = &mut self.hole {
            if *h == name {
                *uses += 1;
                let rep = *rep;
                return self.push(Node::Hole(rep));
            }
        }
        if let Some(&n) = self.lets.get(&name) {
            return n;
        }
        if let Some(i) = self.param(&name) {
            self.uses[i] += 1;
            return match self.params[i].kind {
                Some(ParamKind::Tensor) | None => self.push(Node::Tensor(i)),
                Some(ParamKind::Int) | Some(ParamKind::Float) => self.push(Node::ConstParam(i)),
                Some(k) => {
                    self.errs.spanned(
                        id,
                        format!("parameter `{name}` is declared `{}` ({}), which cannot stand for a tensor operand; declare it `Tensor`, or a number (`f64`/`i64`) to match a constant", k.type_name(), k.describe()),
                    );
                    self.push(Node::Any)
                }
            };
        }
        if name == "None" {
            self.errs.spanned(
                id,
                "`None` is only allowed for an optional operand or attribute",
            );
        } else {
            let names = self.names();
            self.errs.spanned(
                id,
                format!(
                    "unknown name `{name}`: not a parameter or `let` binding of this pattern{}",
                    hint(&name, names.iter().map(String::as_str))
                ),
            );
        }
        self.push(Node::Any)
    }

    fn params_in(&self, n: usize) -> BTreeSet<usize> {
        let mut out = BTreeSet::new();
        self.collect_params(n, &mut out);
        out
    }

    fn collect_params(&self, n: usize, out: &mut BTreeSet<usize>) {
        match &self.nodes[n] {
            Node::Tensor(p) | Node::ConstParam(p) => {
                out.insert(*p);
            }
            Node::Op(o) => {
                for &x in &o.operands {
                    self.collect_params(x, out);
                }
                for a in &o.attrs {
                    if let AttrPattern::Param(p) = a.pat {
                        out.insert(p);
                    }
                }
            }
            Node::Alt(bs) => bs.iter().for_each(|&b| self.collect_params(b, out)),
            Node::Repeat { body, base, .. } => {
                self.collect_params(*body, out);
                self.collect_params(*base, out);
            }
            _ => {}
        }
    }

    fn new_op(&mut self, op: OpNode) -> usize {
        let slot = if self.hole.is_some() {
            None
        } else {
            self.next_slot += 1;
            Some(self.next_slot - 1)
        };
        self.push(Node::Op(OpNode { slot, ..op }))
    }

    fn builtin_call(&mut self, method: &Ident, args: Vec<&Expr>) -> usize {
        let name = method.to_string();
        let name = name.trim_start_matches("r#");
        let name = if name == "where_" { "where" } else { name };
        let Some(spec) = vocab::find(name) else {
            self.errs.spanned(
                method,
                format!(
                    "unknown op `{name}`{} (ops are the built-in vocabulary; a user op is called by the path of its `OpDef` static, e.g. `my_ops::SCALE(x)`)",
                    hint(name, BUILTIN_OPS.iter().map(|o| o.name))
                ),
            );
            for a in args {
                if !matches!(a, Expr::Assign(_)) {
                    self.tensor(a);
                }
            }
            return self.push(Node::Any);
        };
        // Sort the arguments: positional, keyword, `..`.
        let mut positional: Vec<&Expr> = Vec::new();
        let mut keyword: Vec<(&Ident, &Expr)> = Vec::new();
        let mut rest = false;
        for a in &args {
            match a {
                Expr::Assign(asg) => match &*asg.left {
                    Expr::Path(p) if p.path.get_ident().is_some() => {
                        keyword.push((p.path.get_ident().expect("checked"), &asg.right))
                    }
                    l => self.errs.spanned(l, "a keyword argument is `name = value`"),
                },
                Expr::Range(r) if r.start.is_none() && r.end.is_none() => rest = true,
                e => {
                    if !keyword.is_empty() || rest {
                        self.errs.spanned(
                            e,
                            "positional arguments come before keyword arguments and `..`",
                        );
                    }
                    positional.push(e)
                }
            }
        }
        let nops = spec.operands.len();
        let mut operand_args: Vec<Option<Arg>> = (0..nops).map(|_| None).collect();
        let mut attr_args: Vec<Option<&Expr>> = vec![None; spec.attrs.len()];
        for (i, e) in positional.iter().enumerate() {
            if i < nops {
                operand_args[i] = Some(Arg::Expr(e));
            } else if i - nops < spec.attrs.len() {
                attr_args[i - nops] = Some(e);
            } else {
                self.errs.spanned(
                    *e,
                    format!(
                        "too many arguments: `{}` takes {}",
                        spec.name,
                        signature(spec)
                    ),
                );
            }
        }
        let mut unknown_keyword = false;
        for (k, e) in keyword {
            let kname = k.to_string();
            if let Some(i) = spec.operands.iter().position(|o| o.name == kname) {
                if operand_args[i].is_some() {
                    self.errs
                        .spanned(k, format!("operand `{kname}` is given twice"));
                }
                operand_args[i] = Some(Arg::Expr(e));
            } else if let Some(i) = spec.attrs.iter().position(|a| a.name == kname) {
                if attr_args[i].is_some() {
                    self.errs
                        .spanned(k, format!("attribute `{kname}` is given twice"));
                }
                attr_args[i] = Some(e);
            } else {
                unknown_keyword = true;
                let names = spec
                    .attrs
                    .iter()
                    .map(|a| a.name)
                    .chain(spec.operands.iter().map(|o| o.name));
                self.errs.spanned(
                    k,
                    format!(
                        "`{}` has no attribute `{kname}`{} (it takes {})",
                        spec.name,
                        hint(&kname, names),
                        signature(spec)
                    ),
                );
            }
        }
        // Operands.
        let mut operands = Vec::new();
        let mut more = rest;
        let mut absent: Option<&str> = None;
        // `x.op(a?)`: the index of the optional operand and the span of its `?`.
        let mut optional: Option<(usize, proc_macro2::Span)> = None;
        let given = positional.len().min(nops);
        for (i, slot) in spec.operands.iter().enumerate() {
            let arg = operand_args[i].take();
            match (slot.arity, arg) {
                (Arity::Required, None) => {
                    if !rest {
                        self.errs.spanned(
                            method,
                            format!(
                                "`{}` takes {}, found {given} operand(s)",
                                spec.name,
                                signature(spec)
                            ),
                        );
                        return self.push(Node::Any);
                    }
                    more = true;
                    break;
                }
                (Arity::Optional, None) => absent = absent.or(Some(slot.name)),
                (Arity::Optional, Some(Arg::Expr(Expr::Path(p)))) if p.path.is_ident("None") => {
                    absent = absent.or(Some(slot.name))
                }
                (Arity::Optional, Some(Arg::Expr(Expr::Infer(_))))
                    if operand_args[i + 1..].iter().all(Option::is_none) =>
                {
                    more = true;
                }
                (Arity::Variadic, Some(Arg::Expr(e))) => match e {
                    Expr::Infer(_) => more = true,
                    Expr::Array(a) => {
                        for x in &a.elems {
                            let n = self.tensor(x);
                            operands.push(n);
                        }
                    }
                    e => {
                        self.errs.spanned(e, format!("operand `{}` of `{}` takes several values: write them as a list `[a, b]`, or `_` for any", slot.name, spec.name));
                    }
                },
                (Arity::Variadic, None) => {}
                (_, Some(Arg::Expr(Expr::Try(t)))) => {
                    if let Some(prev) = absent {
                        self.errs.spanned(t, format!("operand `{}` is given but `{prev}` before it is not (optional operands fill in order)", slot.name));
                    }
                    if optional.is_some() {
                        self.errs.spanned(&t.question_token, "only one operand of a call can be optional: with two, which would be the value when the call is absent?");
                        let n = self.tensor(&t.expr);
                        operands.push(n);
                        continue;
                    }
                    if let Expr::Try(inner) = &*t.expr {
                        self.errs.spanned(
                            &inner.question_token,
                            "this operand is already optional: write one `?`",
                        );
                    }
                    optional = Some((operands.len(), t.question_token.span));
                    let n = self.tensor(&t.expr);
                    operands.push(n);
                }
                (_, Some(Arg::Expr(e))) => {
                    if let Some(prev) = absent {
                        self.errs.spanned(e, format!("operand `{}` is given but `{prev}` before it is not (optional operands fill in order)", slot.name));
                    }
                    let n = self.tensor(e);
                    operands.push(n);
                }
            }
        }
        // Attributes.
        let mut attrs = Vec::new();
        for (i, a) in spec.attrs.iter().enumerate() {
            let pat = match attr_args[i] {
                Some(e) => self.attr(
                    e,
                    a.kind,
                    a.default == DefaultValue::Null,
                    spec.name,
                    a.name,
                ),
                None if rest || unknown_keyword => None,
                None => match default_lit(a.default) {
                    Some(l) => Some(AttrPattern::Lit(l)),
                    None => {
                        self.errs.spanned(
                            method,
                            format!("missing attribute `{}` of `{}`: give a value, a parameter, or `_` for any (it takes {})", a.name, spec.name, signature(spec)),
                        );
                        None
                    }
                },
            };
            if let Some(pat) = pat {
                attrs.push(AttrCheck {
                    key: AttrKey::Builtin(i, a.name),
                    pat,
                });
            }
        }
        let kept: Vec<usize> = match optional {
            Some((i, _)) => operands
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != i)
                .map(|(_, &n)| n)
                .collect(),
            None => Vec::new(),
        };
        let op = self.new_op(OpNode {
            op: OpRef::Builtin(spec),
            operands,
            more,
            attrs,
            slot: None,
        });
        let Some((_, span)) = optional else {
            return op;
        };
        let [pass] = kept[..] else {
            self.errs.at(
                span,
                format!("an optional operand needs exactly one other operand, the value that stands when the `{}` is absent (`x.{}(a?)`); this call has {}", spec.name, spec.name, kept.len()),
            );
            return op;
        };
        self.optional_part(op, pass, span)
    }

    /// The alternative `present | absent` of an optional part, after checking that it is
    /// not ambiguous with an optional part right below it.
    fn optional_part(&mut self, present: usize, absent: usize, span: proc_macro2::Span) -> usize {
        if self.hole.is_some() {
            self.errs
                .at(span, "optional parts inside `repeat` are not supported");
        }
        let top = |s: &Self, n: usize| match &s.nodes[n] {
            Node::Op(o) => Some(o.op.key()),
            _ => None,
        };
        let inner = match &self.nodes[absent] {
            Node::Alt(bs) if self.optionals.contains_key(&absent) => Some(bs[0]),
            _ => None,
        };
        if let (Some(inner), Some(op)) = (inner, top(self, present)) {
            if top(self, inner).as_deref() == Some(op.as_str()) {
                self.errs.at(span, format!("ambiguous optional parts: two optional `{op}` steps in a row match a single `{op}` two ways (either step could be the one present); merge them into one, or make one of them required"));
            }
        }
        let alt = self.push(Node::Alt(vec![present, absent]));
        self.optionals.insert(alt, span);
        alt
    }

    /// `opt(base, |t| step)`: `step` applied to `base`, or `base` alone.
    fn optional_step(&mut self, id: &Ident, args: &[&Expr], call: &Expr) -> usize {
        const USAGE: &str = "write `opt(x, |t| t.op(..))`: the step `t.op(..)` applied to `x`, or no step at all (then the value is `x` itself)";
        let [base, step] = args else {
            self.errs
                .spanned(call, format!("`opt` takes two arguments; {USAGE}"));
            return self.push(Node::Any);
        };
        let Expr::Closure(cl) = step else {
            self.errs.spanned(
                step,
                format!("the second argument of `opt` is a closure; {USAGE}"),
            );
            return self.push(Node::Any);
        };
        let hole = match cl.inputs.iter().collect::<Vec<_>>().as_slice() {
            [Pat::Ident(p)] => p.ident.clone(),
            _ => {
                self.errs.spanned(
                    &cl.inputs,
                    format!("the closure of `opt` takes one parameter; {USAGE}"),
                );
                return self.push(Node::Any);
            }
        };
        let name = hole.to_string();
        if self.param(&name).is_some() {
            self.errs.spanned(
                &hole,
                format!("the closure parameter `{name}` shadows the parameter `{name}`; pick another name"),
            );
        }
        let base_node = self.tensor(base);
        let before = self.lets.insert(name.clone(), base_node);
        let step_node = self.tensor(&cl.body);
        match before {
            Some(n) => self.lets.insert(name, n),
            None => self.lets.remove(&name),
        };
        if step_node == base_node {
            self.errs.spanned(
                &cl.body,
                format!("the step of `opt` must apply at least one op to `{hole}`; {USAGE}"),
            );
        } else if !self.reaches(step_node, base_node) {
            self.errs.spanned(
                &cl.body,
                format!("the step of `opt` must use `{hole}`: when the step is absent the value is `{hole}` itself; {USAGE}"),
            );
        }
        self.optional_part(step_node, base_node, id.span())
    }

    /// True when node `target` is `n` or below it.
    fn reaches(&self, n: usize, target: usize) -> bool {
        n == target
            || match &self.nodes[n] {
                Node::Op(o) => o.operands.iter().any(|&x| self.reaches(x, target)),
                Node::Alt(bs) => bs.iter().any(|&b| self.reaches(b, target)),
                Node::Repeat { body, base, .. } => {
                    self.reaches(*body, target) || self.reaches(*base, target)
                }
                _ => false,
            }
    }

    /// Parameters bound in every match (`always`) and only when some optional part is
    /// present (`sometimes`), below node `n`.
    fn classify(
        &self,
        n: usize,
        under: bool,
        seen: &mut BTreeSet<(usize, bool)>,
        always: &mut BTreeSet<usize>,
        sometimes: &mut BTreeSet<usize>,
    ) {
        if !seen.insert((n, under)) {
            return;
        }
        let mut note = |p: usize| {
            if under {
                sometimes.insert(p);
            } else {
                always.insert(p);
            }
        };
        match &self.nodes[n] {
            Node::Tensor(p) | Node::ConstParam(p) => note(*p),
            Node::Op(o) => {
                for a in &o.attrs {
                    if let AttrPattern::Param(p) = a.pat {
                        note(p);
                    }
                }
                for &x in &o.operands {
                    self.classify(x, under, seen, always, sometimes);
                }
            }
            Node::Alt(bs) if self.optionals.contains_key(&n) => {
                self.classify(bs[0], true, seen, always, sometimes);
                self.classify(bs[1], under, seen, always, sometimes);
            }
            Node::Alt(bs) => {
                for &b in bs {
                    self.classify(b, under, seen, always, sometimes);
                }
            }
            Node::Repeat { body, base, .. } => {
                self.classify(*body, under, seen, always, sometimes);
                self.classify(*base, under, seen, always, sometimes);
            }
            _ => {}
        }
    }

    /// A parameter is `Option<..>` exactly when it is bound only inside optional parts.
    fn check_optionals(&mut self, roots: &[usize]) {
        if !self.errs.is_empty() {
            // The parts may be malformed; their own errors say more.
            return;
        }
        let (mut seen, mut always, mut sometimes) =
            (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
        for &r in roots {
            self.classify(r, false, &mut seen, &mut always, &mut sometimes);
        }
        for (i, p) in self.params.iter().enumerate() {
            let Some(kind) = p.kind else { continue };
            if self.uses[i] == 0 {
                continue;
            }
            let t = kind.type_name();
            if p.optional && always.contains(&i) {
                self.errs.spanned(
                    &p.ty,
                    format!("`{}` is declared `Option<{t}>` but is bound in every match: it is used outside the optional parts (`x.op(a?)`, `opt(x, |t| ..)`); declare it `{t}`, or use it only inside an optional part", p.name),
                );
            } else if !p.optional && !always.contains(&i) && sometimes.contains(&i) {
                self.errs.spanned(
                    &p.ty,
                    format!("`{}` is bound only when its optional part is present; declare it `Option<{t}>` (the replacement then gets `None` when the part is absent)", p.name),
                );
            }
        }
    }

    fn user_call(&mut self, path: &Path, args: Vec<&Expr>) -> usize {
        let mut operands = Vec::new();
        let mut attrs = Vec::new();
        let mut more = false;
        for a in args {
            match a {
                Expr::Assign(asg) => {
                    let Some(k) = (match &*asg.left {
                        Expr::Path(p) => p.path.get_ident(),
                        _ => None,
                    }) else {
                        self.errs
                            .spanned(&asg.left, "a keyword argument is `name = value`");
                        continue;
                    };
                    let (pat, kind) = self.user_attr(&asg.right);
                    if let Some(pat) = pat {
                        attrs.push(AttrCheck {
                            key: AttrKey::User(k.clone(), kind),
                            pat,
                        });
                    }
                }
                Expr::Range(r) if r.start.is_none() && r.end.is_none() => more = true,
                e => {
                    let n = self.tensor(e);
                    operands.push(n);
                }
            }
        }
        self.new_op(OpNode {
            op: OpRef::User(path.clone()),
            operands,
            more,
            attrs,
            slot: None,
        })
    }

    /// A keyword attribute of a user op: its pattern and, when known, its kind.
    fn user_attr(&mut self, e: &Expr) -> (Option<AttrPattern>, Option<Kind>) {
        let kind = match e {
            Expr::Lit(l) => match &l.lit {
                SynLit::Int(_) => Some(Kind::Int),
                SynLit::Float(_) => Some(Kind::Float),
                SynLit::Bool(_) => Some(Kind::Bool),
                SynLit::Str(_) => Some(Kind::Str),
                _ => None,
            },
            Expr::Unary(u) => match &*u.expr {
                Expr::Lit(syn::ExprLit {
                    lit: SynLit::Float(_),
                    ..
                }) => Some(Kind::Float),
                _ => Some(Kind::Int),
            },
            Expr::Array(_) => Some(Kind::Ints),
            Expr::Path(p) => match p.path.get_ident().and_then(|i| self.param(&i.to_string())) {
                Some(i) => match self.params[i].kind {
                    Some(ParamKind::Int) => Some(Kind::Int),
                    Some(ParamKind::Float) => Some(Kind::Float),
                    Some(ParamKind::Bool) => Some(Kind::Bool),
                    Some(ParamKind::Ints) => Some(Kind::Ints),
                    Some(ParamKind::Str) => Some(Kind::Str),
                    Some(ParamKind::DType) => Some(Kind::DType),
                    _ => None,
                },
                None => Some(Kind::DType),
            },
            _ => None,
        };
        match kind {
            Some(k) => (self.attr(e, k, false, "user op", "attribute"), Some(k)),
            None => (self.attr(e, Kind::Int, false, "user op", "attribute"), None),
        }
    }

    /// A pattern for an attribute of kind `kind`; `None` means any.
    fn attr(
        &mut self,
        e: &Expr,
        kind: Kind,
        nullable: bool,
        op: &str,
        attr: &str,
    ) -> Option<AttrPattern> {
        let want = ParamKind::of_attr(kind);
        match e {
            Expr::Infer(_) => return None,
            Expr::Paren(p) => return self.attr(&p.expr, kind, nullable, op, attr),
            Expr::Path(p) if p.path.get_ident().is_some() => {
                let id = p.path.get_ident().expect("checked");
                let name = id.to_string();
                if let Some(i) = self.param(&name) {
                    self.uses[i] += 1;
                    match self.params[i].kind {
                        Some(k) if k == want => return Some(AttrPattern::Param(i)),
                        Some(ParamKind::Tensor) => {
                            self.errs.spanned(id, format!("`{name}` is a tensor parameter but attribute `{attr}` of `{op}` is {}: a parameter is either a tensor or a scalar; declare a separate `{}` parameter for the attribute", want.describe(), want.type_name()));
                        }
                        Some(k) => {
                            self.errs.spanned(id, format!("attribute `{attr}` of `{op}` is {}, but `{name}` is declared `{}`; declare it `{}`", want.describe(), k.type_name(), want.type_name()));
                        }
                        None => {}
                    }
                    return None;
                }
                if name == "None" && nullable {
                    return Some(AttrPattern::Lit(Lit::Null));
                }
                if kind == Kind::DType {
                    if let Some(d) = DTYPES.iter().find(|d| **d == name) {
                        return Some(AttrPattern::Lit(Lit::DType(d)));
                    }
                }
                if self.lets.contains_key(&name) {
                    self.errs.spanned(id, format!("`{name}` is a tensor (a `let` binding) but attribute `{attr}` of `{op}` is {}", want.describe()));
                    return None;
                }
            }
            Expr::Binary(b) if matches!(b.op, BinOp::BitOr(_)) => {
                let mut branches = Vec::new();
                flatten_or(e, &mut branches);
                let mut lits = Vec::new();
                for b in branches {
                    match self.attr(b, kind, nullable, op, attr) {
                        Some(AttrPattern::Lit(l)) => lits.push(l),
                        Some(_) => self
                            .errs
                            .spanned(b, "alternatives of an attribute are literals"),
                        None => return None,
                    }
                }
                return Some(AttrPattern::OneOf(lits));
            }
            _ => {}
        }
        if let Some(l) = literal(e) {
            let fits = match (&l, kind) {
                (Lit::Int(_), Kind::Int)
                | (Lit::Float(_), Kind::Float)
                | (Lit::Bool(_), Kind::Bool) => true,
                (Lit::Ints(_), Kind::Ints) | (Lit::Str(_), Kind::Str) => true,
                (Lit::Int(v), Kind::Float) => return Some(AttrPattern::Lit(Lit::Float(*v as f64))),
                _ => false,
            };
            if fits {
                return Some(AttrPattern::Lit(l));
            }
        }
        let example = match kind {
            Kind::Int => "`-1`",
            Kind::Float => "`0.5`",
            Kind::Bool => "`true`",
            Kind::Ints => "`[0, 2, 1, 3]`",
            Kind::Str => "`\"tanh\"`",
            Kind::DType => "`f16`",
        };
        self.errs.spanned(
            e,
            format!("attribute `{attr}` of `{op}` is {}: expected a literal like {example}, {} `{}` parameter, or `_` for any", want.describe(), article(want.type_name()), want.type_name()),
        );
        None
    }

    fn repeat(&mut self, id: &Ident, args: &[&Expr], call: &Expr) -> usize {
        const USAGE: &str = "write `repeat(x, |t| t.op(..), min..=max)`: the chain `t.op(..)` applied `min` to `max` times on top of `x`";
        let [base, body, range] = args else {
            self.errs
                .spanned(call, format!("`repeat` takes three arguments; {USAGE}"));
            return self.push(Node::Any);
        };
        if self.hole.is_some() {
            self.errs.spanned(id, "nested `repeat` is not supported");
            return self.push(Node::Any);
        }
        let Expr::Closure(cl) = body else {
            self.errs.spanned(
                body,
                format!("the second argument of `repeat` is a closure; {USAGE}"),
            );
            return self.push(Node::Any);
        };
        let hole = match cl.inputs.iter().collect::<Vec<_>>().as_slice() {
            [Pat::Ident(p)] => p.ident.to_string(),
            _ => {
                self.errs.spanned(
                    &cl.inputs,
                    format!("the closure of `repeat` takes one parameter; {USAGE}"),
                );
                return self.push(Node::Any);
            }
        };
        let (min, max) = match range_bounds(range) {
            Some(b) => b,
            None => {
                self.errs.spanned(range, format!("the count of `repeat` is a range of integer literals (`1..=4`, `2..`, `0..3`) or one integer; {USAGE}"));
                (1, 1)
            }
        };
        if max == 0 || min > max {
            self.errs
                .spanned(range, "the count range of `repeat` is empty");
        }
        let rep = self.push(Node::Any);
        self.hole = Some((hole, rep, 0));
        let body_node = self.tensor(&cl.body);
        let (h, _, uses) = self.hole.take().expect("set above");
        if uses != 1 {
            self.errs.spanned(&cl.body, format!("the body of `repeat` must use `{h}` exactly once (found {uses}): it is where the previous iteration goes"));
        } else if matches!(self.nodes[body_node], Node::Hole(_)) {
            self.errs.spanned(
                &cl.body,
                "the body of `repeat` must apply at least one op to its parameter",
            );
        }
        let base_node = self.tensor(base);
        self.nodes[rep] = Node::Repeat {
            body: body_node,
            base: base_node,
            min,
            max,
        };
        rep
    }

    /// A tensor binding named in a `where` clause: its slot.
    fn tensor_binding(&mut self, e: &Expr, what: &str) -> Option<usize> {
        let id = match e {
            Expr::Path(p) => p.path.get_ident(),
            _ => None,
        };
        let Some(id) = id else {
            self.errs.spanned(
                e,
                format!("`{what}(..)` takes the name of a tensor parameter or `let` binding"),
            );
            return None;
        };
        let name = id.to_string();
        if let Some(i) = self.param(&name) {
            if self.params[i].kind == Some(ParamKind::Tensor) {
                return Some(i);
            }
            self.errs.spanned(
                id,
                format!(
                    "`{what}(..)` needs a tensor, but `{name}` is declared `{}`",
                    self.params[i].ty.to_token_stream()
                ),
            );
            return None;
        }
        if let Some(&n) = self.lets.get(&name) {
            match &self.nodes[n] {
                Node::Op(o) => return o.slot,
                Node::Tensor(p) => return Some(*p),
                _ => {}
            }
        }
        self.unknown_binding(id);
        None
    }

    fn unknown_binding(&mut self, id: &Ident) {
        let name = id.to_string();
        let names = self.names();
        self.errs.spanned(
            id,
            format!(
                "the `where` clause names `{name}`, which is not a parameter or `let` binding of this pattern{}",
                hint(&name, names.iter().map(String::as_str))
            ),
        );
    }

    /// A term of a comparison and its type (`n` number, `d` dim, `t` dtype, `b` bool).
    fn term(&mut self, e: &Expr, reads: &mut Vec<usize>) -> Option<(Term, char)> {
        match e {
            Expr::Paren(p) => self.term(&p.expr, reads),
            Expr::Call(c) => {
                let f = match &*c.func {
                    Expr::Path(p) => p.path.get_ident().map(|i| i.to_string()),
                    _ => None,
                };
                let args: Vec<&Expr> = c.args.iter().collect();
                let f = f.unwrap_or_default();
                let (t, ty) = match (f.as_str(), args.as_slice()) {
                    ("rank", [x]) => (Term::Rank(self.tensor_binding(x, "rank")?), 'n'),
                    ("users", [x]) => (Term::Users(self.tensor_binding(x, "users")?), 'n'),
                    ("dtype", [x]) => (Term::DType(self.tensor_binding(x, "dtype")?), 't'),
                    ("dim", [x, i]) => {
                        let s = self.tensor_binding(x, "dim")?;
                        let Some(Lit::Int(i)) = literal(i) else {
                            self.errs
                                .spanned(i, "the index of `dim(x, i)` is an integer literal");
                            return None;
                        };
                        (Term::Dim(s, i), 'd')
                    }
                    _ => {
                        self.errs.spanned(&c.func, "in a `where` comparison, call `rank(x)`, `dtype(x)`, `dim(x, i)` or `users(x)`");
                        return None;
                    }
                };
                if let Term::Rank(s) | Term::Users(s) | Term::DType(s) | Term::Dim(s, _) = t {
                    reads.push(s);
                }
                Some((t, ty))
            }
            Expr::Path(p) if p.path.get_ident().is_some() => {
                let id = p.path.get_ident().expect("checked");
                let name = id.to_string();
                if let Some(i) = self.param(&name) {
                    let ty = match self.params[i].kind? {
                        ParamKind::Int | ParamKind::Float => 'n',
                        ParamKind::Bool => 'b',
                        ParamKind::DType => 't',
                        ParamKind::Tensor => {
                            self.errs.spanned(id, format!("compare a property of `{name}`: `rank({name})`, `dtype({name})`, `dim({name}, i)` or `users({name})`"));
                            return None;
                        }
                        k => {
                            self.errs.spanned(id, format!("`{name}` is {}, which comparisons do not support; use `check(|{name}| ..)`", k.describe()));
                            return None;
                        }
                    };
                    reads.push(i);
                    return Some((Term::Param(i), ty));
                }
                if let Some(d) = DTYPES.iter().find(|d| **d == name) {
                    return Some((Term::DTypeLit(d), 't'));
                }
                self.unknown_binding(id);
                None
            }
            e => match literal(e) {
                Some(Lit::Int(v)) => Some((Term::Int(v), 'n')),
                Some(Lit::Float(v)) => Some((Term::Float(v), 'n')),
                Some(Lit::Bool(v)) => Some((Term::Bool(v), 'b')),
                _ => {
                    self.errs.spanned(e, "unsupported term in a `where` comparison: use `rank(x)`, `dtype(x)`, `dim(x, i)`, `users(x)`, a scalar parameter, a number, a bool or a dtype (`f16`)");
                    None
                }
            },
        }
    }

    fn constraint(&mut self, e: &Expr) -> Option<Constraint> {
        let text = tidy(&e.to_token_stream().to_string());
        match e {
            Expr::Binary(b) => {
                let cmp = match b.op {
                    BinOp::Eq(_) => Cmp::Eq,
                    BinOp::Ne(_) => Cmp::Ne,
                    BinOp::Lt(_) => Cmp::Lt,
                    BinOp::Le(_) => Cmp::Le,
                    BinOp::Gt(_) => Cmp::Gt,
                    BinOp::Ge(_) => Cmp::Ge,
                    _ => {
                        self.errs.spanned(e, CONSTRAINT_FORMS);
                        return None;
                    }
                };
                let mut reads = Vec::new();
                let l = self.term(&b.left, &mut reads);
                let r = self.term(&b.right, &mut reads);
                let ((l, lt), (r, rt)) = (l?, r?);
                let ok = match (lt, rt) {
                    ('n' | 'd', 'n' | 'd') => true,
                    ('t', 't') | ('b', 'b') => matches!(cmp, Cmp::Eq | Cmp::Ne),
                    _ => false,
                };
                if !ok {
                    self.errs.spanned(e, "these two sides cannot be compared (numbers and dims compare with each other; dtypes and bools only with `==` and `!=` against their own kind)");
                    return None;
                }
                if reads.is_empty() {
                    self.errs
                        .spanned(e, "this constraint reads no binding of the pattern");
                    return None;
                }
                reads.sort_unstable();
                reads.dedup();
                Some(Constraint {
                    reads,
                    check: Check::Compare(l, cmp, r),
                    text,
                })
            }
            Expr::Call(c) if matches!(&*c.func, Expr::Path(p) if p.path.is_ident("check")) => {
                let Some(Expr::Closure(cl)) = c.args.first().filter(|_| c.args.len() == 1) else {
                    self.errs.spanned(e, "`check` takes one closure whose parameters name the bindings it reads: `check(|q, s| q.rank() == 4 && s > 0.0)`");
                    return None;
                };
                let mut args = Vec::new();
                for p in &cl.inputs {
                    let Pat::Ident(pi) = p else {
                        self.errs.spanned(p, "a parameter of a `check` closure is the name of a pattern binding (no type: it is given by the pattern)");
                        continue;
                    };
                    let name = pi.ident.to_string();
                    if let Some(i) = self.param(&name) {
                        if let Some(k) = self.params[i].kind {
                            args.push((pi.ident.clone(), i, k));
                        }
                    } else if let Some(s) =
                        self.lets.get(&name).and_then(|&n| match &self.nodes[n] {
                            Node::Op(o) => o.slot,
                            Node::Tensor(p) => Some(*p),
                            _ => None,
                        })
                    {
                        args.push((pi.ident.clone(), s, ParamKind::Tensor));
                    } else {
                        self.unknown_binding(&pi.ident);
                    }
                }
                let mut reads: Vec<usize> = args.iter().map(|a| a.1).collect();
                if reads.is_empty() {
                    reads = self.required_params();
                }
                reads.sort_unstable();
                reads.dedup();
                Some(Constraint {
                    reads,
                    check: Check::Closure(args, cl.body.clone()),
                    text,
                })
            }
            Expr::Call(c) if matches!(&*c.func, Expr::Path(p) if p.path.is_ident("pred")) => {
                let Some(Expr::Path(p)) = c.args.first().filter(|_| c.args.len() == 1) else {
                    self.errs.spanned(e, "`pred` takes the path of a `fn(&Graph, &Bindings) -> bool`: `pred(my_checks::is_causal)`");
                    return None;
                };
                Some(Constraint {
                    reads: self.required_params(),
                    check: Check::Pred(p.path.clone()),
                    text,
                })
            }
            _ => {
                self.errs.spanned(e, CONSTRAINT_FORMS);
                None
            }
        }
    }
}

const CONSTRAINT_FORMS: &str = "a constraint is a comparison (`rank(q) == 4`, `dtype(q) == f16`, `dim(q, -1) == dim(k, -1)`, `s > 0.0`, `users(x) == 1`), `check(|a, b| ..)` or `pred(path::to::fn)`";

fn is_upper(s: &str) -> bool {
    s.chars().any(|c| c.is_ascii_uppercase()) && !s.chars().any(|c| c.is_ascii_lowercase())
}

fn flatten_or<'e>(e: &'e Expr, out: &mut Vec<&'e Expr>) {
    match e {
        Expr::Binary(b) if matches!(b.op, BinOp::BitOr(_)) => {
            flatten_or(&b.left, out);
            flatten_or(&b.right, out);
        }
        Expr::Paren(p) if matches!(&*p.expr, Expr::Binary(b) if matches!(b.op, BinOp::BitOr(_))) => {
            flatten_or(&p.expr, out)
        }
        e => out.push(e),
    }
}

fn number(l: &SynLit) -> Option<f64> {
    match l {
        SynLit::Int(i) => i.base10_parse::<f64>().ok(),
        SynLit::Float(f) => f.base10_parse::<f64>().ok(),
        _ => None,
    }
}

/// A literal: numbers (possibly negated), bools, strings, int lists.
pub fn literal(e: &Expr) -> Option<Lit> {
    match e {
        Expr::Paren(p) => literal(&p.expr),
        Expr::Lit(l) => match &l.lit {
            SynLit::Int(i) => i.base10_parse::<i64>().ok().map(Lit::Int),
            SynLit::Float(f) => f.base10_parse::<f64>().ok().map(Lit::Float),
            SynLit::Bool(b) => Some(Lit::Bool(b.value)),
            SynLit::Str(s) => Some(Lit::Str(s.value())),
            _ => None,
        },
        Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) => match literal(&u.expr)? {
            Lit::Int(v) => Some(Lit::Int(-v)),
            Lit::Float(v) => Some(Lit::Float(-v)),
            _ => None,
        },
        Expr::Array(a) => a
            .elems
            .iter()
            .map(|x| match literal(x) {
                Some(Lit::Int(v)) => Some(v),
                _ => None,
            })
            .collect::<Option<Vec<i64>>>()
            .map(Lit::Ints),
        _ => None,
    }
}

fn range_bounds(e: &Expr) -> Option<(u16, u16)> {
    let int = |e: &Expr| match literal(e) {
        Some(Lit::Int(v)) if (0..u16::MAX as i64).contains(&v) => Some(v as u16),
        _ => None,
    };
    match e {
        Expr::Range(r) => {
            let min = match &r.start {
                Some(s) => int(s)?,
                None => 0,
            };
            let max = match (&r.end, &r.limits) {
                (None, _) => u16::MAX,
                (Some(x), syn::RangeLimits::Closed(_)) => int(x)?,
                (Some(x), syn::RangeLimits::HalfOpen(_)) => int(x)?.checked_sub(1)?,
            };
            Some((min, max))
        }
        e => int(e).map(|n| (n, n)),
    }
}

fn default_lit(d: DefaultValue) -> Option<Lit> {
    Some(match d {
        DefaultValue::Required => return None,
        DefaultValue::Null => Lit::Null,
        DefaultValue::Int(v) => Lit::Int(v),
        DefaultValue::Float(v) => Lit::Float(v),
        DefaultValue::Bool(v) => Lit::Bool(v),
        DefaultValue::Ints(v) => Lit::Ints(v.to_vec()),
        DefaultValue::Str(v) => Lit::Str(v.to_string()),
        DefaultValue::DType(v) => {
            Lit::DType(DTYPES.iter().find(|d| **d == v).copied().unwrap_or("f32"))
        }
    })
}

/// "2 operands (input, other) and attributes dim0, dim1" for messages.
pub fn signature(op: &OpSpec) -> String {
    let ops: Vec<String> = op
        .operands
        .iter()
        .map(|o| match o.arity {
            Arity::Required => o.name.to_string(),
            Arity::Optional => format!("{}?", o.name),
            Arity::Variadic => format!("[{}..]", o.name),
        })
        .collect();
    let n = op.operands.len();
    let mut s = format!(
        "{n} operand{} ({})",
        if n == 1 { "" } else { "s" },
        ops.join(", ")
    );
    if op.attrs.is_empty() {
        s.push_str(" and no attributes");
    } else {
        let attrs: Vec<String> = op
            .attrs
            .iter()
            .map(|a| match a.default {
                DefaultValue::Required => a.name.to_string(),
                _ => format!("{}?", a.name),
            })
            .collect();
        s.push_str(&format!(" then attributes {}", attrs.join(", ")));
    }
    s
}

/// Token text made readable: `rank (q) == 4` -> `rank(q) == 4`.
pub fn tidy(s: &str) -> String {
    s.replace(" (", "(")
        .replace("( ", "(")
        .replace(" )", ")")
        .replace(" ,", ",")
        .replace("- ", "-")
        .replace("| ", "|")
        .replace(" . ", ".")
}

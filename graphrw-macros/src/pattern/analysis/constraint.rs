//! `where` constraints: comparisons of rank, dtype, dims, scalars and use counts,
//! `check(|..| ..)` and `pred(path)`, with the bindings each reads.

use super::*;

const CONSTRAINT_FORMS: &str = "a constraint is a comparison (`rank(q) == 4`, `dtype(q) == f16`, `dim(q, -1) == dim(k, -1)`, `s > 0.0`, `users(x) == 1`), `check(|a, b| ..)` or `pred(path::to::fn)`";

impl Sema<'_> {
    /// A tensor binding named in a `where` clause: its slot.
    pub(super) fn tensor_binding(&mut self, e: &Expr, what: &str) -> Option<usize> {
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

    pub(super) fn unknown_binding(&mut self, id: &Ident) {
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

    /// A term of a comparison and its type: `i` an integer (`rank`, `users`, an `i64`
    /// parameter), `I` an integer literal, `f` an `f64` parameter, `F` a float literal,
    /// `d` a dim, `t` a dtype, `b` a bool.
    pub(super) fn term(&mut self, e: &Expr, reads: &mut Vec<usize>) -> Option<(Term, char)> {
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
                    ("rank", [x]) => (Term::Rank(self.tensor_binding(x, "rank")?), 'i'),
                    ("users", [x]) => (Term::Users(self.tensor_binding(x, "users")?), 'i'),
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
                        ParamKind::Int => 'i',
                        ParamKind::Float => 'f',
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
                if let Some(d) = dtype_alias(&name) {
                    self.errs.spanned(
                        id,
                        format!("`{name}` is not a dtype name in a pattern: write `{d}` (dtypes are `{}`)", DTYPES.join("`, `")),
                    );
                    return None;
                }
                self.unknown_binding(id);
                None
            }
            e => match literal(e) {
                Some(Lit::Int(v)) => Some((Term::Int(v), 'I')),
                Some(Lit::Float(v)) => Some((Term::Float(v), 'F')),
                Some(Lit::Bool(v)) => Some((Term::Bool(v), 'b')),
                _ => {
                    self.errs.spanned(e, "unsupported term in a `where` comparison: use `rank(x)`, `dtype(x)`, `dim(x, i)`, `users(x)`, a scalar parameter, a number, a bool or a dtype (`f16`)");
                    None
                }
            },
        }
    }

    /// False, with an error at the literal, when a comparison sets an integer against a
    /// float literal (`d0 > 0.5` with `d0: i64`, `rank(x) > 2.5`), or an `f64` parameter
    /// against an integer literal (`s > 1` with `s: f64`): the first compares with a
    /// bound the integer can never take, the second reads as an integer bound on a
    /// float; either is more likely a slip in the declaration or the bound than meant.
    /// Integers and `f64` parameters otherwise compare as numbers (`s > rank(x)`
    /// compares `s` with the rank as an `f64`).
    fn same_number_kind(
        &mut self,
        (l, lt): (&Expr, char),
        op: &BinOp,
        (r, rt): (&Expr, char),
    ) -> bool {
        let text = |e: &Expr| tidy(&e.to_token_stream().to_string());
        if let (('i' | 'd', 'F'), Some(Lit::Float(v))) = ((lt, rt), literal(r)) {
            let what = if lt == 'd' {
                "a dim, an integer"
            } else {
                "an integer"
            };
            // The integer bound that says the same.
            let same = match op {
                BinOp::Gt(_) => Some(format!("> {}", v.floor())),
                BinOp::Ge(_) => Some(format!(">= {}", v.ceil())),
                BinOp::Lt(_) => Some(format!("< {}", v.ceil())),
                BinOp::Le(_) => Some(format!("<= {}", v.floor())),
                _ => None,
            };
            let same = same
                .map(|s| format!("compare with an integer (`{} {s}` says the same)", text(l)))
                .unwrap_or_else(|| "compare with an integer".into());
            self.errs.spanned(
                r,
                format!(
                    "`{}` is {what}, but `{}` is a float literal: {same}, or declare the parameter `f64` to compare a float",
                    text(l),
                    text(r),
                ),
            );
            return false;
        }
        for ((a, at), (lit, litt)) in [((l, lt), (r, rt)), ((r, rt), (l, lt))] {
            match (at, litt) {
                ('i' | 'd', 'F') => {
                    self.errs.spanned(
                        lit,
                        format!(
                            "`{}` is an integer, but `{}` is a float literal: compare with an integer literal, or declare the parameter `f64` to compare a float",
                            text(a),
                            text(lit),
                        ),
                    );
                    return false;
                }
                ('f', 'I') => {
                    let t = text(lit);
                    self.errs.spanned(
                        lit,
                        format!(
                            "`{}` is `f64`, but `{t}` is an integer literal: write the bound as a float, `{t}.0`",
                            text(a)
                        ),
                    );
                    return false;
                }
                _ => {}
            }
        }
        true
    }

    pub(super) fn constraint(&mut self, e: &Expr) -> Option<Constraint> {
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
                if !self.same_number_kind((&b.left, lt), &b.op, (&b.right, rt)) {
                    return None;
                }
                let ok = match (lt, rt) {
                    ('i' | 'I' | 'f' | 'F' | 'd', 'i' | 'I' | 'f' | 'F' | 'd') => true,
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

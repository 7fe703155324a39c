//! Op calls in a pattern body: built-in ops checked against the op table (names with
//! "did you mean", operand counts, attribute names and kinds) and user ops (`OP(x, ..)`),
//! whose signature is checked when the emitted static is evaluated.

use super::*;

impl Sema<'_> {
    pub(super) fn builtin_call(&mut self, method: &Ident, args: Vec<&Expr>) -> usize {
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

    pub(super) fn user_call(&mut self, path: &Path, args: Vec<&Expr>) -> usize {
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
    pub(super) fn user_attr(&mut self, e: &Expr) -> (Option<AttrPattern>, Option<Kind>) {
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
    pub(super) fn attr(
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
}

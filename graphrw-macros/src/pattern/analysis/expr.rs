//! Tensor expressions of a pattern body: parameters, `let` names, `_`, alternatives,
//! and the op nodes they build.

use super::*;

impl Sema<'_> {
    /// A pattern for a tensor operand.
    pub(super) fn tensor(&mut self, e: &Expr) -> usize {
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

    pub(super) fn name(&mut self, id: &Ident) -> usize {
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

    pub(super) fn params_in(&self, n: usize) -> BTreeSet<usize> {
        let mut out = BTreeSet::new();
        self.collect_params(n, &mut out);
        out
    }

    pub(super) fn collect_params(&self, n: usize, out: &mut BTreeSet<usize>) {
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

    pub(super) fn new_op(&mut self, op: OpNode) -> usize {
        let slot = if self.hole.is_some() {
            None
        } else {
            self.next_slot += 1;
            Some(self.next_slot - 1)
        };
        self.push(Node::Op(OpNode { slot, ..op }))
    }
}

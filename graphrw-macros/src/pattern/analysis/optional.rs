//! Optional parts (`x.op()?`, `opt(..)`) and `repeat(x, |t| .., min..=max)`: the
//! alternatives they make, and the checks that each optional part can be told apart.

use super::*;

impl Sema<'_> {
    /// The alternative `present | absent` of an optional part, after checking that it is
    /// not ambiguous with an optional part right below it.
    pub(super) fn optional_part(
        &mut self,
        present: usize,
        absent: usize,
        span: proc_macro2::Span,
    ) -> usize {
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
    pub(super) fn optional_step(&mut self, id: &Ident, args: &[&Expr], call: &Expr) -> usize {
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
    pub(super) fn reaches(&self, n: usize, target: usize) -> bool {
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
    pub(super) fn classify(
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
    pub(super) fn check_optionals(&mut self, roots: &[usize]) {
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

    pub(super) fn repeat(&mut self, id: &Ident, args: &[&Expr], call: &Expr) -> usize {
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
}

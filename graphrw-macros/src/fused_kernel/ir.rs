//! The expression of a fused kernel: a DAG of elementwise ops and last-dimension
//! reductions over tensor and scalar parameters, built from the body of the function
//! (the same syntax as `pattern!`), with every error spanned at the user's token.

use std::collections::HashMap;

use syn::spanned::Spanned;
use syn::{BinOp, Expr, Lit, Stmt, UnOp};

use crate::pattern::ir::{kind_of_type, ParamKind};
use crate::pattern::parse::PatternFn;

/// What a fused kernel body supports (quoted by errors).
pub const SUPPORTED: &str = "a fused kernel body is `let` bindings and one expression of elementwise ops (add, sub, mul, div, pow, maximum, minimum, neg, abs, reciprocal, sqrt, rsqrt, exp, log, sin, cos, erf, tanh, sigmoid, relu, silu, where, eq/ne/lt/le/gt/ge, cast), `rotate_half()` of a tensor parameter (over the last dimension) and reductions over the last dimension (`sum`/`mean`/`amax` with `dims=[-1], keepdim=true`), over tensor and `f64` parameters and number literals, with `a | b` alternatives";

/// What `rotate_half` takes (quoted by its errors).
pub const ROTATE_HALF: &str = "`rotate_half` applies to a tensor parameter only (`x.rotate_half()` with `x: Tensor`), not to an expression or a `let` binding: the rule that fuses the kernel matches the `slice`/`neg`/`concat` chain on a value the pattern binds; take the rotated value as a parameter";

/// A node id.
pub type Id = usize;

/// The unary and binary ops, from the workspace's one list of each (`graphrw-ops`).
/// A body may use the unary ops [`Un::in_fused_kernels`] admits and the binary ops
/// but `and`/`or` (comparisons give 0/1 values, used as `where` conditions); the others
/// never reach the DAG ([`un_op`], [`bin_op`]).
pub use graphrw_ops::{BinaryOp as Bin, UnaryOp as Un};

/// Last-dimension reductions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Red {
    Sum,
    Mean,
    Amax,
}

impl Red {
    pub fn name(self) -> &'static str {
        match self {
            Red::Sum => "sum",
            Red::Mean => "mean",
            Red::Amax => "amax",
        }
    }
}

/// Dtypes a `cast` may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dt {
    F32,
    F64,
    F16,
    BF16,
    Bool,
    I64,
}

impl Dt {
    pub fn parse(s: &str) -> Option<Dt> {
        Some(match s {
            "f32" => Dt::F32,
            "f64" => Dt::F64,
            "f16" => Dt::F16,
            "bf16" => Dt::BF16,
            "bool" => Dt::Bool,
            "i64" => Dt::I64,
            _ => return None,
        })
    }
    pub fn variant(self) -> &'static str {
        match self {
            Dt::F32 => "F32",
            Dt::F64 => "F64",
            Dt::F16 => "F16",
            Dt::BF16 => "BF16",
            Dt::Bool => "Bool",
            Dt::I64 => "I64",
        }
    }
}

/// One node of the expression DAG.
#[derive(Clone, Copy, Debug, PartialEq, Hash, Eq)]
pub enum Node {
    /// Tensor parameter `k`.
    Input(usize),
    /// Scalar parameter `k` (an `f64` attribute of the fused op).
    Scalar(usize),
    /// A literal (bits of the f64).
    Lit(u64),
    Un(Un, Id),
    Bin(Bin, Id, Id),
    Where(Id, Id, Id),
    Cast(Id, Dt),
    Reduce(Red, Id),
    /// Rotate-half over the last dimension `d` (`h = d / 2`):
    /// `concat([neg(a[.., h:]), a[.., :h]], -1)`. In the body only of a tensor parameter;
    /// vjps apply it (and [`Node::RotT`]) to expressions that have the output's row.
    Rot(Id),
    /// The transpose of [`Node::Rot`]: `concat([a[.., d - h:], neg(a[.., :d - h])], -1)`
    /// (for even `d`, `-rot(a)`). Only in vjps.
    RotT(Id),
    /// Code generation only (see [`lower_rot`](super::walk::lower_rot)): tensor parameter `k` read at the row
    /// position rotated by half a row, `(j + d / 2) mod d`.
    InputRot(usize),
    /// Code generation only (see [`lower_rot`](super::walk::lower_rot)): `a`, negated in the first half of the row.
    HalfNeg(Id),
}

/// The DAG (hash-consed) with its parameters.
#[derive(Clone, Default)]
pub struct Dag {
    pub nodes: Vec<Node>,
    index: HashMap<Node, Id>,
}

impl Dag {
    pub fn add(&mut self, n: Node) -> Id {
        if let Some(&id) = self.index.get(&n) {
            return id;
        }
        self.nodes.push(n);
        let id = self.nodes.len() - 1;
        self.index.insert(n, id);
        id
    }
    pub fn lit(&mut self, v: f64) -> Id {
        self.add(Node::Lit(v.to_bits()))
    }
    pub fn is_scalar_like(&self, id: Id) -> bool {
        matches!(self.nodes[id], Node::Scalar(_) | Node::Lit(_))
    }
}

/// A kernel's parameters and expression.
pub struct Kernel {
    pub tensors: Vec<syn::Ident>,
    pub scalars: Vec<syn::Ident>,
    pub dag: Dag,
    /// Every alternative of the body (the first is the kernel's definition).
    pub roots: Vec<Id>,
    /// Where each node was written (first occurrence), for later errors.
    pub spans: HashMap<Id, proc_macro2::Span>,
}

enum Param {
    Tensor(usize),
    Scalar(usize),
}

struct Sema {
    params: HashMap<String, Param>,
    lets: HashMap<String, Vec<Id>>,
    dag: Dag,
    spans: HashMap<Id, proc_macro2::Span>,
    errors: Vec<syn::Error>,
}

const MAX_ALTERNATIVES: usize = 64;

/// Analyses a fused kernel function.
pub fn analyse(f: &PatternFn) -> Result<Kernel, syn::Error> {
    let mut s = Sema {
        params: HashMap::new(),
        lets: HashMap::new(),
        dag: Dag::default(),
        spans: HashMap::new(),
        errors: Vec::new(),
    };
    let mut tensors = Vec::new();
    let mut scalars = Vec::new();
    for p in &f.params {
        match kind_of_type(&p.ty) {
            Some(ParamKind::Tensor) => {
                s.params
                    .insert(p.name.to_string(), Param::Tensor(tensors.len()));
                tensors.push(p.name.clone());
            }
            Some(ParamKind::Float) => {
                s.params
                    .insert(p.name.to_string(), Param::Scalar(scalars.len()));
                scalars.push(p.name.clone());
            }
            _ => s.errors.push(syn::Error::new_spanned(
                &p.ty,
                "a fused kernel parameter is a `Tensor` or an `f64` scalar",
            )),
        }
    }
    if tensors.is_empty() {
        s.errors.push(syn::Error::new(
            f.name.span(),
            "a fused kernel needs at least one `Tensor` parameter",
        ));
    }
    if tensors.len() > 16 {
        s.errors.push(syn::Error::new(
            f.name.span(),
            "a fused kernel takes at most 16 tensor parameters",
        ));
    }
    if !f.constraints.is_empty() {
        s.errors.push(syn::Error::new_spanned(
            &f.constraints[0],
            "a fused kernel takes no `where` constraints: it must hold for every input",
        ));
    }
    if !matches!(&f.ret, syn::Type::Path(p) if p.path.is_ident("Tensor")) {
        s.errors.push(syn::Error::new_spanned(
            &f.ret,
            "a fused kernel returns one `Tensor`",
        ));
    }
    let mut roots = Vec::new();
    let n = f.body.stmts.len();
    for (i, st) in f.body.stmts.iter().enumerate() {
        match st {
            Stmt::Local(l) if i + 1 < n => {
                let name = match &l.pat {
                    syn::Pat::Ident(pi) => pi.ident.to_string(),
                    other => {
                        s.errors.push(syn::Error::new_spanned(
                            other,
                            "bind a plain name: `let name = ..;`",
                        ));
                        continue;
                    }
                };
                let Some(init) = &l.init else {
                    s.errors
                        .push(syn::Error::new_spanned(l, "a `let` needs a value"));
                    continue;
                };
                let v = s.expr(&init.expr);
                s.lets.insert(name, v);
            }
            Stmt::Expr(e, None) if i + 1 == n => roots = s.expr(e),
            other => s
                .errors
                .push(syn::Error::new_spanned(other, SUPPORTED.to_string())),
        }
    }
    if roots.is_empty() && s.errors.is_empty() {
        s.errors.push(syn::Error::new(
            f.name.span(),
            "the body needs a final expression (the kernel's output)",
        ));
    }
    for &r in &roots {
        if s.dag.is_scalar_like(r) {
            let sp = s.spans.get(&r).copied().unwrap_or(f.name.span());
            s.errors.push(syn::Error::new(
                sp,
                "the output of a fused kernel must be a tensor expression",
            ));
            break;
        }
    }
    if let Some(mut e) = s.errors.first().cloned() {
        for x in s.errors.iter().skip(1) {
            e.combine(x.clone());
        }
        return Err(e);
    }
    Ok(Kernel {
        tensors,
        scalars,
        dag: s.dag,
        roots,
        spans: s.spans,
    })
}

fn number(e: &Expr) -> Option<f64> {
    match e {
        Expr::Lit(l) => match &l.lit {
            Lit::Float(f) => f.base10_parse().ok(),
            Lit::Int(i) => i.base10_parse::<i64>().ok().map(|v| v as f64),
            _ => None,
        },
        Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) => number(&u.expr).map(|v| -v),
        Expr::Paren(p) => number(&p.expr),
        _ => None,
    }
}

/// The unary op a body may call by `name`: a row of the list that `fused_kernel!`
/// computes (not `gelu`, `not`, `isnan`).
fn un_op(name: &str) -> Option<Un> {
    Un::of_op(name).filter(|u| u.in_fused_kernels())
}

/// The binary op a body may call by `name` (not the logical `and`/`or`).
fn bin_op(name: &str) -> Option<Bin> {
    Bin::of_op(name).filter(|b| !b.is_logical())
}

fn red_op(name: &str) -> Option<Red> {
    Some(match name {
        "sum" => Red::Sum,
        "mean" => Red::Mean,
        "amax" => Red::Amax,
        _ => return None,
    })
}

/// Positional and keyword arguments of a call.
struct Args<'e> {
    pos: Vec<&'e Expr>,
    kw: Vec<(String, &'e Expr, &'e Expr)>,
}

fn split_args<'e>(args: impl Iterator<Item = &'e Expr>) -> Args<'e> {
    let mut out = Args {
        pos: Vec::new(),
        kw: Vec::new(),
    };
    for a in args {
        match a {
            Expr::Assign(asg) => {
                if let Expr::Path(p) = &*asg.left {
                    if let Some(id) = p.path.get_ident() {
                        out.kw.push((id.to_string(), a, &asg.right));
                        continue;
                    }
                }
                out.pos.push(a);
            }
            _ => out.pos.push(a),
        }
    }
    out
}

impl Sema {
    fn err(&mut self, tokens: impl quote::ToTokens, msg: impl std::fmt::Display) -> Vec<Id> {
        self.errors.push(syn::Error::new_spanned(tokens, msg));
        Vec::new()
    }

    fn note(&mut self, id: Id, span: proc_macro2::Span) -> Id {
        self.spans.entry(id).or_insert(span);
        id
    }

    /// Every alternative of `e`.
    fn expr(&mut self, e: &Expr) -> Vec<Id> {
        match e {
            Expr::Paren(p) => self.expr(&p.expr),
            Expr::Group(g) => self.expr(&g.expr),
            Expr::Binary(b) if matches!(b.op, BinOp::BitOr(_)) => {
                let mut l = self.expr(&b.left);
                l.extend(self.expr(&b.right));
                l
            }
            Expr::Lit(_) | Expr::Unary(_) if number(e).is_some() => {
                let v = number(e).unwrap_or(0.0);
                let id = self.dag.lit(v);
                vec![self.note(id, e.span())]
            }
            Expr::Path(p) => {
                let Some(id) = p.path.get_ident() else {
                    return self.err(p, SUPPORTED);
                };
                let name = id.to_string();
                if let Some(v) = self.lets.get(&name) {
                    return v.clone();
                }
                match self.params.get(&name) {
                    Some(Param::Tensor(k)) => {
                        let id = self.dag.add(Node::Input(*k));
                        vec![self.note(id, e.span())]
                    }
                    Some(Param::Scalar(k)) => {
                        let id = self.dag.add(Node::Scalar(*k));
                        vec![self.note(id, e.span())]
                    }
                    None => self.err(
                        p,
                        format!("unknown name `{name}`: use a parameter or a `let` binding"),
                    ),
                }
            }
            Expr::MethodCall(m) => {
                let recv: &Expr = &m.receiver;
                let args = std::iter::once(recv).chain(m.args.iter());
                self.call(&m.method.to_string(), &m.method, args, e)
            }
            Expr::Call(c) => {
                let name = match &*c.func {
                    Expr::Path(p) if p.path.get_ident().is_some() => p.path.get_ident().cloned(),
                    _ => None,
                };
                let Some(name) = name else {
                    return self.err(&c.func, "a fused kernel calls ops by their plain name (user ops are not elementwise expressions it can fuse)");
                };
                self.call(&name.to_string(), &name, c.args.iter(), e)
            }
            _ => self.err(e, SUPPORTED),
        }
    }

    /// A tensor operand: scalars are refused (they stand only beside a tensor).
    fn tensor_operand(&mut self, e: &Expr, op: &str) -> Vec<Id> {
        let v = self.expr(e);
        if let Some(&id) = v.iter().find(|&&id| self.dag.is_scalar_like(id)) {
            let what = match self.dag.nodes[id] {
                Node::Scalar(k) => {
                    let name = self
                        .params
                        .iter()
                        .find(|(_, p)| matches!(p, Param::Scalar(j) if *j == k))
                        .map(|(n, _)| n.clone())
                        .unwrap_or_default();
                    format!("`{name}` is a scalar (`f64`) parameter but `{op}` needs a tensor here: a scalar may only be an operand of a binary op or `where` beside a tensor; declare it `{name}: Tensor` to pass a tensor")
                }
                _ => format!("`{op}` needs a tensor here, not a literal"),
            };
            return self.err(e, what);
        }
        v
    }

    fn call<'e>(
        &mut self,
        name: &str,
        tok: &syn::Ident,
        args: impl Iterator<Item = &'e Expr>,
        whole: &Expr,
    ) -> Vec<Id> {
        let args = split_args(args);
        let span = whole.span();
        if let Some(op) = un_op(name) {
            if args.pos.len() != 1 || !args.kw.is_empty() {
                return self.err(tok, format!("`{name}` takes one operand"));
            }
            let a = self.tensor_operand(args.pos[0], name);
            return a
                .into_iter()
                .map(|x| {
                    let id = self.dag.add(Node::Un(op, x));
                    self.note(id, span)
                })
                .collect();
        }
        if let Some(op) = bin_op(name) {
            if args.pos.len() != 2 || !args.kw.is_empty() {
                return self.err(tok, format!("`{name}` takes two operands"));
            }
            let a = self.expr(args.pos[0]);
            let b = self.expr(args.pos[1]);
            if a.iter().chain(&b).all(|&x| self.dag.is_scalar_like(x)) && !a.is_empty() {
                return self.err(whole, format!("`{name}` needs a tensor operand: ops between scalars only are not expressions of the kernel's tensors"));
            }
            return self.product2(&a, &b, |d, x, y| d.add(Node::Bin(op, x, y)), span);
        }
        if name == "where" {
            if args.pos.len() != 3 || !args.kw.is_empty() {
                return self.err(tok, "`where` takes three operands: condition, input, other");
            }
            let c = self.tensor_operand(args.pos[0], name);
            let a = self.expr(args.pos[1]);
            let b = self.expr(args.pos[2]);
            let mut out = Vec::new();
            for &x in &c {
                let ab = self.product2(&a, &b, |d, y, z| d.add(Node::Where(x, y, z)), span);
                out.extend(ab);
            }
            out.truncate(MAX_ALTERNATIVES);
            return out;
        }
        if name == "cast" {
            let dt = args
                .kw
                .iter()
                .find(|k| k.0 == "dtype")
                .map(|k| k.2)
                .or(args.pos.get(1).copied());
            let dt = dt.and_then(|e| match e {
                Expr::Path(p) => p.path.get_ident().and_then(|i| Dt::parse(&i.to_string())),
                _ => None,
            });
            let Some(dt) = dt else {
                return self.err(
                    whole,
                    "write `x.cast(dtype=f32)` (f32, f64, f16, bf16, bool or i64)",
                );
            };
            let a = self.tensor_operand(args.pos[0], name);
            return a
                .into_iter()
                .map(|x| {
                    let id = self.dag.add(Node::Cast(x, dt));
                    self.note(id, span)
                })
                .collect();
        }
        if name == "rotate_half" {
            if args.pos.len() != 1 || !args.kw.is_empty() {
                return self.err(
                    tok,
                    "`rotate_half` takes no arguments: write `x.rotate_half()` (over the last dimension)",
                );
            }
            let e = args.pos[0];
            let pname = match e {
                Expr::Path(p) => p.path.get_ident().map(|i| i.to_string()),
                _ => None,
            };
            let param = pname
                .as_ref()
                .filter(|n| !self.lets.contains_key(*n))
                .and_then(|n| self.params.get(n));
            return match param {
                Some(Param::Tensor(k)) => {
                    let x = self.dag.add(Node::Input(*k));
                    self.note(x, e.span());
                    let id = self.dag.add(Node::Rot(x));
                    vec![self.note(id, span)]
                }
                Some(Param::Scalar(_)) => self.err(
                    e,
                    format!(
                        "`{}` is a scalar (`f64`) parameter; {ROTATE_HALF}",
                        pname.unwrap_or_default()
                    ),
                ),
                None => self.err(e, ROTATE_HALF),
            };
        }
        if let Some(r) = red_op(name) {
            let mut ok_dims = false;
            let mut keep = false;
            for (k, kwe, v) in &args.kw {
                match k.as_str() {
                    "dims" => {
                        let vals: Option<Vec<i64>> = match v {
                            Expr::Array(a) => a
                                .elems
                                .iter()
                                .map(|x| number(x).map(|f| f as i64))
                                .collect(),
                            _ => None,
                        };
                        if vals.as_deref() == Some(&[-1]) {
                            ok_dims = true;
                        } else {
                            return self.err(kwe, format!("a fused kernel reduces over the last dimension only: write `{name}(dims=[-1], keepdim=true)`; reductions over other axes are not fused (they are not row-local)"));
                        }
                    }
                    "keepdim" => {
                        keep =
                            matches!(v, Expr::Lit(l) if matches!(&l.lit, Lit::Bool(b) if b.value));
                        if !keep {
                            return self.err(kwe, "a fused reduction keeps the reduced dimension (`keepdim=true`) so its result broadcasts along the row");
                        }
                    }
                    _ => {
                        return self.err(
                            kwe,
                            format!("`{name}` in a fused kernel takes `dims=[-1], keepdim=true`"),
                        )
                    }
                }
            }
            if !ok_dims || !keep || args.pos.len() != 1 {
                return self.err(whole, format!("write `{name}(dims=[-1], keepdim=true)`: a fused kernel reduces over the last dimension only"));
            }
            let a = self.tensor_operand(args.pos[0], name);
            return a
                .into_iter()
                .map(|x| {
                    let id = self.dag.add(Node::Reduce(r, x));
                    self.note(id, span)
                })
                .collect();
        }
        if crate::vocab::find(name).is_some() {
            return self.err(tok, format!("`{name}` is not an elementwise op or a last-dimension reduction, so it cannot be part of a fused kernel; {SUPPORTED}"));
        }
        self.err(tok, format!("unknown op `{name}`; {SUPPORTED}"))
    }

    fn product2(
        &mut self,
        a: &[Id],
        b: &[Id],
        f: impl Fn(&mut Dag, Id, Id) -> Id,
        span: proc_macro2::Span,
    ) -> Vec<Id> {
        let mut out = Vec::new();
        for &x in a {
            for &y in b {
                if out.len() < MAX_ALTERNATIVES {
                    let id = f(&mut self.dag, x, y);
                    out.push(self.note(id, span));
                }
            }
        }
        out
    }
}

//! The pattern pretty-printer: a compiled pattern printed back in the pattern language.
//!
//! ```text
//! pattern sfdp_1(query: Tensor, key: Tensor, value: Tensor, inv_scale: f64) -> Tensor {
//!     matmul(softmax(div(matmul(query, transpose(key, dim0=-2, dim1=-1)), inv_scale), dim=-1), value)
//! }
//! ```
//! Attributes that may be anything are left out; a node shared by two uses (a `let`) is
//! printed at each use.

use std::fmt;

use crate::pattern::{AttrPat, Check, ConstPat, PatNode, Pattern, Term};

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pattern {}(", self.name)?;
        for (i, p) in self.params.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}: {}", p.name, p.kind.type_name())?;
        }
        f.write_str(") -> ")?;
        if self.roots.len() == 1 {
            f.write_str("Tensor")?;
        } else {
            let t = vec!["Tensor"; self.roots.len()];
            write!(f, "({})", t.join(", "))?;
        }
        if !self.constraints.is_empty() {
            f.write_str("\nwhere\n")?;
            for c in self.constraints {
                writeln!(f, "    {},", c.text)?;
            }
            f.write_str("{\n    ")?;
        } else {
            f.write_str(" {\n    ")?;
        }
        if self.roots.len() > 1 {
            f.write_str("(")?;
        }
        for (i, r) in self.roots.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            self.write_node(f, r.node)?;
        }
        if self.roots.len() > 1 {
            f.write_str(")")?;
        }
        f.write_str("\n}")
    }
}

impl Pattern {
    /// Writes node `n` (and what it refers to) in the pattern language.
    pub fn write_node(&self, f: &mut dyn fmt::Write, n: u16) -> fmt::Result {
        match &self.nodes[n as usize] {
            PatNode::Any => f.write_str("_"),
            PatNode::Tensor(s) => f.write_str(self.slot_name(*s)),
            PatNode::Const(ConstPat::Value(v)) => write!(f, "{v:?}"),
            PatNode::Const(ConstPat::Param(s)) => f.write_str(self.slot_name(*s)),
            PatNode::Hole(_) => f.write_str("t"),
            PatNode::Alt(bs) => {
                f.write_str("(")?;
                for (i, &b) in bs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(" | ")?;
                    }
                    self.write_node(f, b)?;
                }
                f.write_str(")")
            }
            PatNode::Repeat(r) => {
                f.write_str("repeat(")?;
                self.write_node(f, r.base)?;
                f.write_str(", |t| ")?;
                self.write_node(f, r.body)?;
                if r.max == u16::MAX {
                    write!(f, ", {}..)", r.min)
                } else {
                    write!(f, ", {}..={})", r.min, r.max)
                }
            }
            PatNode::Op(o) => {
                write!(f, "{}(", o.op.name)?;
                let mut first = true;
                for &x in o.operands {
                    if !first {
                        f.write_str(", ")?;
                    }
                    first = false;
                    self.write_node(f, x)?;
                }
                for a in o.attrs {
                    if !first {
                        f.write_str(", ")?;
                    }
                    first = false;
                    write!(f, "{}=", a.name)?;
                    self.write_attr(f, &a.pat)?;
                }
                if o.more_operands {
                    f.write_str(if first { ".." } else { ", .." })?;
                }
                f.write_str(")")
            }
        }
    }

    fn write_attr(&self, f: &mut dyn fmt::Write, a: &AttrPat) -> fmt::Result {
        match a {
            AttrPat::Int(v) => write!(f, "{v}"),
            AttrPat::Float(v) => write!(f, "{v:?}"),
            AttrPat::Bool(v) => write!(f, "{v}"),
            AttrPat::Ints(v) => write!(f, "{v:?}"),
            AttrPat::Str(v) => write!(f, "{v:?}"),
            AttrPat::DType(v) => write!(f, "{v}"),
            AttrPat::Null => f.write_str("None"),
            AttrPat::Param(s) => f.write_str(self.slot_name(*s)),
            AttrPat::OneOf(alts) => {
                for (i, x) in alts.iter().enumerate() {
                    if i > 0 {
                        f.write_str(" | ")?;
                    }
                    self.write_attr(f, x)?;
                }
                Ok(())
            }
        }
    }

    /// The name of a parameter slot, or `%N` for an op node's slot.
    fn slot_name(&self, s: u16) -> &'static str {
        self.params.get(s as usize).map(|p| p.name).unwrap_or("%")
    }
}

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Term::Rank(s) => write!(f, "rank(%{s})"),
            Term::DType(s) => write!(f, "dtype(%{s})"),
            Term::Dim(s, i) => write!(f, "dim(%{s}, {i})"),
            Term::Users(s) => write!(f, "users(%{s})"),
            Term::Param(s) => write!(f, "%{s}"),
            Term::Int(v) => write!(f, "{v}"),
            Term::Float(v) => write!(f, "{v:?}"),
            Term::DTypeLit(v) => write!(f, "{v}"),
            Term::Bool(v) => write!(f, "{v}"),
        }
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Check::Compare(l, op, r) => write!(f, "{l} {} {r}", op.symbol()),
            Check::Pred(_) => f.write_str("<predicate>"),
        }
    }
}

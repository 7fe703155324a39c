//! The sub-program of an elementwise group: which built-in ops run in which order on
//! which values, written as a node attribute so that a group node is self-contained
//! (printable, verifiable, decomposable).
//!
//! The text form, one instruction per `;`, values `in<i>` (operand `i` of the group
//! node) and `%<k>` (the result of instruction `k`):
//!
//! ```text
//! %0 = add(in0, in1); %1 = gelu(%0, approximate="tanh"); %2 = mul(%1, in2)
//! ```

use std::fmt::Write as _;

use crate::builder::Builder;
use crate::meta::{DType, TensorMeta};
use crate::ops::{
    self, Arity, AttrDefault, AttrKind, AttrSpec, AttrValue, Attrs, Infer, InferError, OpClass,
    OpDef, OperandSpec, OutputCount,
};
use crate::{GraphError, Value};

/// The internal op a group of elementwise nodes becomes: operands are the group's
/// inputs, attribute `program` its instructions, attribute `outputs` which instruction
/// results leave the group (one node output each, in that order).
pub static ELEMENTWISE_GROUP: OpDef = OpDef {
    name: "fused.elementwise_group",
    doc: "A group of elementwise ops evaluated tile by tile (see `program`).",
    operands: &[OperandSpec {
        name: "inputs",
        arity: Arity::Variadic,
    }],
    attrs: &[
        AttrSpec {
            name: "program",
            kind: AttrKind::Str,
            default: AttrDefault::Required,
        },
        AttrSpec {
            name: "outputs",
            kind: AttrKind::Ints,
            default: AttrDefault::Required,
        },
    ],
    outputs: OutputCount::PerElementOf("outputs"),
    commutative: false,
    class: OpClass::Other,
    infer: Infer::Fn(infer_group),
    decompose: Some(decompose_group),
    builtin: None,
};

/// Where an instruction reads an operand from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operand {
    /// Operand `i` of the group node.
    Input(usize),
    /// The result of instruction `k` (an earlier one).
    Result(usize),
}

/// One instruction: a built-in elementwise op applied to earlier values.
#[derive(Clone, Debug, PartialEq)]
pub struct Instr {
    /// The built-in op.
    pub op: &'static OpDef,
    /// Its operands.
    pub args: Vec<Operand>,
    /// Its attributes, aligned with the op's signature.
    pub attrs: Vec<AttrValue>,
}

/// A parsed group program.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    /// The instructions, in evaluation order.
    pub instrs: Vec<Instr>,
    /// The instructions whose results are the group's outputs, in output order.
    pub outputs: Vec<usize>,
}

impl Program {
    /// The `program` attribute text.
    pub fn text(&self) -> String {
        let mut s = String::new();
        for (k, ins) in self.instrs.iter().enumerate() {
            if k > 0 {
                s.push_str("; ");
            }
            let _ = write!(s, "%{k} = {}(", ins.op.name);
            let mut first = true;
            for a in &ins.args {
                if !first {
                    s.push_str(", ");
                }
                first = false;
                let _ = match a {
                    Operand::Input(i) => write!(s, "in{i}"),
                    Operand::Result(r) => write!(s, "%{r}"),
                };
            }
            for (spec, v) in ins.op.attrs.iter().zip(&ins.attrs) {
                if !first {
                    s.push_str(", ");
                }
                first = false;
                let _ = write!(s, "{}={v}", spec.name);
            }
            s.push(')');
        }
        s
    }

    /// The `outputs` attribute.
    pub fn output_attr(&self) -> Vec<i64> {
        self.outputs.iter().map(|&k| k as i64).collect()
    }

    /// Reads a program back from a node's attributes; `inputs` is its operand count.
    pub fn from_attrs(attrs: &Attrs, inputs: usize) -> Result<Program, InferError> {
        let text = attrs.str("program")?;
        let outputs = attrs.ints("outputs")?;
        let mut instrs = Vec::new();
        for (k, part) in text.split(';').enumerate() {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            instrs.push(parse_instr(part, k, instrs.len(), inputs)?);
        }
        let outputs = outputs
            .iter()
            .map(|&o| {
                usize::try_from(o)
                    .ok()
                    .filter(|&o| o < instrs.len())
                    .ok_or_else(|| {
                        InferError(format!(
                            "output {o} names no instruction (the program has {})",
                            instrs.len()
                        ))
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if outputs.is_empty() {
            return Err(InferError("a group has at least one output".into()));
        }
        Ok(Program { instrs, outputs })
    }

    /// The metadata of every instruction result, from the inputs' metadata, by each
    /// op's own inference.
    pub fn infer_all(&self, inputs: &[&TensorMeta]) -> Result<Vec<TensorMeta>, InferError> {
        let mut metas: Vec<TensorMeta> = Vec::with_capacity(self.instrs.len());
        for (k, ins) in self.instrs.iter().enumerate() {
            let args: Vec<&TensorMeta> = ins
                .args
                .iter()
                .map(|a| match *a {
                    Operand::Input(i) => inputs[i],
                    Operand::Result(r) => &metas[r],
                })
                .collect();
            let Infer::Fn(f) = ins.op.infer else {
                return Err(InferError(format!(
                    "instruction %{k}: `{}` has no inference function",
                    ins.op.name
                )));
            };
            let mut out = f(&args, &Attrs::new(ins.op.attrs, &ins.attrs))
                .map_err(|e| InferError(format!("instruction %{k} ({}): {e}", ins.op.name)))?;
            if out.len() != 1 {
                return Err(InferError(format!(
                    "instruction %{k}: `{}` has {} outputs, a group op needs 1",
                    ins.op.name,
                    out.len()
                )));
            }
            metas.push(out.remove(0));
        }
        Ok(metas)
    }
}

fn parse_instr(part: &str, k: usize, index: usize, inputs: usize) -> Result<Instr, InferError> {
    let bad = |why: String| InferError(format!("program instruction {k} `{part}`: {why}"));
    let (lhs, rhs) = part
        .split_once('=')
        .ok_or_else(|| bad("expected `%k = op(...)`".into()))?;
    if lhs.trim() != format!("%{index}") {
        return Err(bad(format!("expected result `%{index}`")));
    }
    let rhs = rhs.trim();
    let open = rhs
        .find('(')
        .ok_or_else(|| bad("expected `op(...)`".into()))?;
    let body = rhs[open + 1..]
        .strip_suffix(')')
        .ok_or_else(|| bad("missing `)`".into()))?;
    let name = rhs[..open].trim();
    let op = ops::lookup(name)
        .filter(|op| op.class == OpClass::Elementwise)
        .ok_or_else(|| bad(format!("`{name}` is not a built-in elementwise op")))?;
    let mut args = Vec::new();
    let mut named: Vec<(&str, &str)> = Vec::new();
    for tok in body.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        if let Some((key, val)) = tok.split_once('=') {
            named.push((key.trim(), val.trim()));
        } else if let Some(i) = tok.strip_prefix("in") {
            let i: usize = i.parse().map_err(|_| bad(format!("bad operand `{tok}`")))?;
            if i >= inputs {
                return Err(bad(format!("`{tok}` but the node has {inputs} operands")));
            }
            args.push(Operand::Input(i));
        } else if let Some(r) = tok.strip_prefix('%') {
            let r: usize = r.parse().map_err(|_| bad(format!("bad operand `{tok}`")))?;
            if r >= index {
                return Err(bad(format!("`{tok}` is not an earlier result")));
            }
            args.push(Operand::Result(r));
        } else {
            return Err(bad(format!("bad operand `{tok}`")));
        }
    }
    let (min, max) = op.operand_range();
    if args.len() < min || max.is_some_and(|m| args.len() > m) {
        return Err(bad(format!("`{name}` takes {min} operands")));
    }
    let mut attrs = Vec::with_capacity(op.attrs.len());
    for spec in op.attrs {
        let v = match named.iter().find(|(n, _)| *n == spec.name) {
            Some((_, text)) => parse_attr(spec, text).ok_or_else(|| {
                bad(format!(
                    "attribute `{}` should be a {}",
                    spec.name, spec.kind
                ))
            })?,
            None => spec
                .default
                .value()
                .ok_or_else(|| bad(format!("attribute `{}` is required", spec.name)))?,
        };
        attrs.push(v);
    }
    if let Some((n, _)) = named
        .iter()
        .find(|(n, _)| !op.attrs.iter().any(|s| s.name == *n))
    {
        return Err(bad(format!("`{name}` has no attribute `{n}`")));
    }
    Ok(Instr { op, args, attrs })
}

fn parse_attr(spec: &AttrSpec, text: &str) -> Option<AttrValue> {
    Some(match spec.kind {
        AttrKind::Int => AttrValue::Int(text.parse().ok()?),
        AttrKind::Float => AttrValue::Float(text.parse().ok()?),
        AttrKind::Bool => AttrValue::Bool(text.parse().ok()?),
        AttrKind::Str => AttrValue::Str(text.strip_prefix('"')?.strip_suffix('"')?.to_string()),
        AttrKind::DType => AttrValue::DType(DType::from_name(text)?),
        AttrKind::Ints => return None,
    })
}

/// True when `v` can be written in a program attribute and read back unchanged.
pub fn attr_encodable(v: &AttrValue) -> bool {
    match v {
        AttrValue::Str(s) => s
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.'),
        AttrValue::Ints(_) | AttrValue::Null => false,
        _ => true,
    }
}

fn infer_group(inputs: &[&TensorMeta], attrs: &Attrs) -> Result<Vec<TensorMeta>, InferError> {
    let p = Program::from_attrs(attrs, inputs.len())?;
    let all = p.infer_all(inputs)?;
    Ok(p.outputs.iter().map(|&k| all[k].clone()).collect())
}

/// The group's decomposition: its instructions as ordinary nodes.
fn decompose_group(b: &Builder, x: &[Value], attrs: &Attrs) -> Result<Vec<Value>, GraphError> {
    let p = Program::from_attrs(attrs, x.len()).map_err(|e| GraphError::Infer {
        op: ELEMENTWISE_GROUP.name,
        node: None,
        inputs: Vec::new(),
        message: e.0,
    })?;
    let mut results: Vec<Value> = Vec::with_capacity(p.instrs.len());
    for ins in &p.instrs {
        let args: Vec<Value> = ins
            .args
            .iter()
            .map(|a| match *a {
                Operand::Input(i) => x[i],
                Operand::Result(r) => results[r],
            })
            .collect();
        let named: Vec<(&str, AttrValue)> = ins
            .op
            .attrs
            .iter()
            .map(|s| s.name)
            .zip(ins.attrs.iter().cloned())
            .collect();
        results.push(b.apply(ins.op, &args, &named)?[0]);
    }
    Ok(p.outputs.iter().map(|&k| results[k]).collect())
}

//! One ONNX node as the importer reads it ([`At`]): its inputs, outputs and attributes,
//! and the checked readers of its attributes.

use crate::graph::Value;
use crate::onnx::proto::attribute_type;
use crate::onnx::proto::AttributeProto;
use crate::onnx::proto::NodeProto;
use crate::onnx::table::Held;
use crate::onnx::table::HeldValues;
use crate::onnx::OnnxError;
use std::borrow::Cow;

/// The inputs and attributes of one ONNX node, with its name for messages.
/// `'m` is the lifetime of the model's bytes or decoded messages (the names), `'n` that
/// of this node's lists.
pub(crate) struct At<'m, 'n> {
    pub(crate) op_type: &'m str,
    pub(crate) domain: &'m str,
    /// Input names, `""` for an absent optional input.
    pub(crate) input: &'n [&'m str],
    pub(crate) output: &'n [&'m str],
    /// Per input, its value when it was already defined as the node was read (the fast
    /// route looks each name up once); empty where the names are looked up as read.
    pub(crate) known: &'n [Option<Value>],
    /// The fast route's number of each input and output name
    /// ([`crate::onnx::decode::Numbering`]; `ABSENT` for `""`); empty on the plain route.
    pub(crate) numbers: &'n [u32],
    pub(crate) out_numbers: &'n [u32],
    pub(crate) attribute: &'n [AttributeProto],
    /// The node itself, for what only an opaque node keeps (its other fields, its
    /// subgraphs).
    pub(crate) source: Source<'m>,
    pub(crate) name: Cow<'m, str>,
}

/// Where an [`At`] was read from.
#[derive(Clone, Copy)]
pub(crate) enum Source<'m> {
    /// A decoded message (the plain route).
    Proto(&'m NodeProto),
    /// The bytes of a `NodeProto` (the fast route; no subgraphs).
    Bytes(&'m [u8]),
}

/// The name a node is known by in messages and in the graph: its ONNX name, or `n<i>`
/// (its index in the file) when it has none.
pub(crate) fn node_name(name: &str, index: usize) -> Cow<'_, str> {
    if name.is_empty() {
        Cow::Owned(format!("n{index}"))
    } else {
        Cow::Borrowed(name)
    }
}

impl<'m> At<'m, '_> {
    /// A valid form graphrw does not read: the node passes through as opaque.
    pub(crate) fn err(&self, message: impl Into<String>) -> OnnxError {
        OnnxError::node(self.op_type, &self.name, message)
    }

    /// A node that breaks the ONNX spec: the model is refused (`MALFORMED.md`).
    pub(crate) fn bad(&self, message: impl Into<String>) -> OnnxError {
        OnnxError::malformed(self.op_type, &self.name, message)
    }

    pub(crate) fn attr(&self, name: &str) -> Option<&AttributeProto> {
        self.attribute.iter().find(|a| a.name == name)
    }

    /// Refuses attributes the mapping does not know (they might change the meaning).
    pub(crate) fn only_attrs(&self, known: &[&str]) -> Result<(), OnnxError> {
        self.only_attrs_of(|name| known.contains(&name), || known.to_vec())
    }

    /// [`At::only_attrs`] with the names known as a test, and listed (for the message)
    /// only when one is refused.
    pub(crate) fn only_attrs_of<'k>(
        &self,
        reads: impl Fn(&str) -> bool,
        list: impl Fn() -> Vec<&'k str>,
    ) -> Result<(), OnnxError> {
        for a in self.attribute {
            if !reads(a.name.as_str()) {
                let known = list();
                return Err(self.err(format!(
                    "attribute `{}` is not supported (graphrw reads: {})",
                    a.name,
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                )));
            }
            if !a.ref_attr_name.is_empty() {
                return Err(self.err(format!(
                    "attribute `{}` refers to a function attribute",
                    a.name
                )));
            }
        }
        Ok(())
    }

    pub(crate) fn kind_check(
        &self,
        a: &AttributeProto,
        want: i32,
        what: &str,
    ) -> Result<(), OnnxError> {
        if a.r#type != 0 && a.r#type != want {
            return Err(self.bad(format!(
                "attribute `{}` should be {what} (type {want}), found type {}",
                a.name, a.r#type
            )));
        }
        Ok(())
    }

    pub(crate) fn int(&self, name: &str, default: i64) -> Result<i64, OnnxError> {
        match self.attr(name) {
            Some(a) => {
                self.kind_check(a, attribute_type::INT, "an int")?;
                Ok(a.i)
            }
            None => Ok(default),
        }
    }

    pub(crate) fn float(&self, name: &str, default: f32) -> Result<f32, OnnxError> {
        match self.attr(name) {
            Some(a) => {
                self.kind_check(a, attribute_type::FLOAT, "a float")?;
                Ok(a.f)
            }
            None => Ok(default),
        }
    }

    pub(crate) fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, OnnxError> {
        match self.attr(name) {
            Some(a) => {
                self.kind_check(a, attribute_type::INTS, "an int list")?;
                Ok(Some(a.ints.clone()))
            }
            None => Ok(None),
        }
    }

    pub(crate) fn string(&self, name: &str, default: &str) -> Result<String, OnnxError> {
        match self.attr(name) {
            Some(a) => {
                self.kind_check(a, attribute_type::STRING, "a string")?;
                String::from_utf8(a.s.clone())
                    .map_err(|_| self.bad(format!("attribute `{name}` is not UTF-8")))
            }
            None => Ok(default.to_string()),
        }
    }

    /// The name of input `i`, `None` when absent or empty.
    pub(crate) fn input_name(&self, i: usize) -> Option<&'m str> {
        self.input.get(i).copied().filter(|s| !s.is_empty())
    }

    pub(crate) fn inputs_between(&self, min: usize, max: usize) -> Result<(), OnnxError> {
        let n = self.input.len();
        if n < min || n > max {
            let want = if min == max {
                format!("{min}")
            } else if max == usize::MAX {
                format!("at least {min}")
            } else {
                format!("{min} to {max}")
            };
            return Err(self.bad(format!("takes {want} inputs, found {n}")));
        }
        Ok(())
    }

    /// Checks an attribute held at the values graphrw reads (`table::Held`).
    pub(crate) fn held(&self, h: &Held) -> Result<(), OnnxError> {
        let (found, reads) = match h.values {
            HeldValues::Int { default, accept } => {
                let v = self.int(h.onnx, default)?;
                if accept.contains(&v) {
                    return Ok(());
                }
                (v.to_string(), format!("{accept:?}"))
            }
            HeldValues::Str { default, accept } => {
                let v = self.string(h.onnx, default)?;
                if accept.contains(&v.as_str()) {
                    return Ok(());
                }
                (format!("`{v}`"), accept.join(", "))
            }
        };
        Err(self.err(format!(
            "attribute `{}` {found} is not supported (graphrw reads {reads})",
            h.onnx
        )))
    }

    /// Refuses optional outputs past the first `n` that the mapping cannot produce.
    pub(crate) fn only_outputs(&self, n: usize) -> Result<(), OnnxError> {
        if let Some(extra) = self.output.iter().skip(n).find(|o| !o.is_empty()) {
            return Err(self.err(format!(
                "output `{extra}` is not supported (only the first {n} output(s))"
            )));
        }
        Ok(())
    }
}

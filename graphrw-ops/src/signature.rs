//! The kinds of a pattern's parameters: one list, read by the `pattern!` macro (which
//! checks a signature against the op table) and by the runtime pattern trees it emits.

use crate::vocab::Kind;

/// The kind of a pattern parameter (the type written in the pattern's signature).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParamKind {
    /// `Tensor`: any value of the graph.
    Tensor,
    /// `i64`: an int attribute, or a constant node holding one integral number.
    Int,
    /// `f64`: a float attribute, or a constant node holding one number.
    Float,
    /// `bool`: a bool attribute.
    Bool,
    /// `Ints` (or `Vec<i64>`): an int-list attribute.
    Ints,
    /// `String`: a string attribute.
    Str,
    /// `DType`: a dtype attribute.
    DType,
}

impl ParamKind {
    /// The kind a signature's type names (its text without spaces: `Tensor`, `i64`,
    /// `Vec<i64>`, ...), if it names one.
    pub fn from_type_name(text: &str) -> Option<ParamKind> {
        Some(match text {
            "Tensor" | "Var" => ParamKind::Tensor,
            "i64" => ParamKind::Int,
            "f64" => ParamKind::Float,
            "bool" => ParamKind::Bool,
            "Ints" | "Vec<i64>" => ParamKind::Ints,
            "String" | "Str" => ParamKind::Str,
            "DType" => ParamKind::DType,
            _ => return None,
        })
    }

    /// The parameter kind that binds an attribute of kind `k`.
    pub fn of_attr(k: Kind) -> ParamKind {
        match k {
            Kind::Int => ParamKind::Int,
            Kind::Float => ParamKind::Float,
            Kind::Bool => ParamKind::Bool,
            Kind::Ints => ParamKind::Ints,
            Kind::Str => ParamKind::Str,
            Kind::DType => ParamKind::DType,
        }
    }

    /// What it is, for messages (`a tensor`, `an int`).
    pub fn describe(self) -> &'static str {
        match self {
            ParamKind::Tensor => "a tensor",
            ParamKind::Int => "an int",
            ParamKind::Float => "a float",
            ParamKind::Bool => "a bool",
            ParamKind::Ints => "an int list",
            ParamKind::Str => "a string",
            ParamKind::DType => "a dtype",
        }
    }

    /// The type as written in a pattern signature.
    pub fn type_name(self) -> &'static str {
        match self {
            ParamKind::Tensor => "Tensor",
            ParamKind::Int => "i64",
            ParamKind::Float => "f64",
            ParamKind::Bool => "bool",
            ParamKind::Ints => "Ints",
            ParamKind::Str => "String",
            ParamKind::DType => "DType",
        }
    }
}

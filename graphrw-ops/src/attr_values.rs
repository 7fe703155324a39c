//! Attributes whose value is one of a fixed set of words, as enums: the words are read
//! and written here only (by the op table's defaults and the ONNX edge), and every
//! reader matches the enum.

use crate::UnaryOp;

/// `gelu`'s `approximate` attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GeluApproximation {
    /// `"none"`: the exact GELU, `x * Phi(x)` with the error function.
    None,
    /// `"tanh"`: the tanh approximation.
    Tanh,
}

impl GeluApproximation {
    /// Every value.
    pub const ALL: &'static [GeluApproximation] =
        &[GeluApproximation::None, GeluApproximation::Tanh];

    /// The value the attribute's word names (`"none"`, `"tanh"`), if any.
    pub fn parse(word: &str) -> Option<GeluApproximation> {
        GeluApproximation::ALL
            .iter()
            .copied()
            .find(|a| a.word() == word)
    }

    /// The attribute's word for this value (what the op table, the printer and ONNX
    /// write).
    pub const fn word(self) -> &'static str {
        match self {
            GeluApproximation::None => "none",
            GeluApproximation::Tanh => "tanh",
        }
    }

    /// The unary elementwise op that computes a `gelu` with this approximation.
    pub const fn unary(self) -> UnaryOp {
        match self {
            GeluApproximation::None => UnaryOp::Gelu,
            GeluApproximation::Tanh => UnaryOp::GeluTanh,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_parse_back_and_others_do_not() {
        for &a in GeluApproximation::ALL {
            assert_eq!(GeluApproximation::parse(a.word()), Some(a));
        }
        assert_eq!(GeluApproximation::parse("erf"), None);
        assert_eq!(GeluApproximation::Tanh.unary(), UnaryOp::GeluTanh);
    }
}

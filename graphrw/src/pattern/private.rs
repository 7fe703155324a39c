//! Support for the code `pattern!`, `replacement!` and `rule_set!` emit. Not a public
//! API: reached as `graphrw::__private`.

pub use crate::ops::builtin;
pub use crate::ops::{AttrKind, OpDef};
pub use crate::pattern::{
    AttrCheck, AttrPat, Bindings, Check, CmpOp, ConstPat, Constraint, Link, Match, OpPat, Param,
    ParamKind, PatNode, Pattern, PatternMatch, RepeatPat, Root, Rule, RuleSet, TensorRef, Term,
    VerifySpec,
};
pub use crate::{Builder, DType, Graph, GraphError, Value, Var};

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The index of attribute `name` of a user op, checked at compile time (the static
/// initialiser that calls it fails to evaluate when the op has no such attribute, or
/// when it has another kind).
pub const fn user_attr_index(op: &OpDef, name: &str, kind: Option<AttrKind>) -> usize {
    let mut i = 0;
    while i < op.attrs.len() {
        if str_eq(op.attrs[i].name, name) {
            if let Some(k) = kind {
                if op.attrs[i].kind as u8 != k as u8 {
                    panic!(
                        "this attribute of the user op has another kind than the pattern gives it"
                    );
                }
            }
            return i;
        }
        i += 1;
    }
    panic!("the user op has no attribute of this name: check the name against the op's `OpDef` (its `attrs`)")
}

/// The fewest and most operands `op` takes (`usize::MAX`: any number from the fewest),
/// for the spanned operand-count check `pattern!` emits at a user op's call.
pub const fn user_op_operand_range(op: &'static OpDef) -> (usize, usize) {
    let mut min = 0;
    let mut max = 0;
    let mut unbounded = false;
    let mut i = 0;
    while i < op.operands.len() {
        match op.operands[i].arity {
            crate::ops::Arity::Required => {
                min += 1;
                max += 1;
            }
            crate::ops::Arity::Optional => max += 1,
            crate::ops::Arity::Variadic => unbounded = true,
        }
        i += 1;
    }
    (min, if unbounded { usize::MAX } else { max })
}

/// The user op itself, after checking at compile time that it takes `n` operands and
/// that its declaration is sound ([`OpDef::checked`]: `like` needs a decomposition).
pub const fn user_op_with_operands(op: &'static OpDef, n: usize, more: bool) -> &'static OpDef {
    if matches!(op.infer, crate::ops::Infer::Like) && op.decompose.is_none() {
        panic!("the user op is declared `infer: Infer::Like` (metadata like its decomposition) but has no decomposition: give it `decompose: Some(..)` or an `Infer::Fn`");
    }
    let mut min = 0;
    let mut max = 0;
    let mut unbounded = false;
    let mut i = 0;
    while i < op.operands.len() {
        match op.operands[i].arity {
            crate::ops::Arity::Required => {
                min += 1;
                max += 1;
            }
            crate::ops::Arity::Optional => max += 1,
            crate::ops::Arity::Variadic => unbounded = true,
        }
        i += 1;
    }
    if (n < min && !more) || (n > max && !unbounded) {
        panic!("the user op takes another number of operands than the pattern gives it: check them against the op's `OpDef` (its `operands`)");
    }
    op
}

/// The index of the first of `params` that `given` lacks.
pub const fn missing_param(params: &[&str], given: &[&str]) -> Option<usize> {
    let mut i = 0;
    while i < params.len() {
        let mut j = 0;
        let mut found = false;
        while j < given.len() {
            if str_eq(params[i], given[j]) {
                found = true;
            }
            j += 1;
        }
        if !found {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// What a replacement returns: one value per pattern output.
pub trait IntoOutputs {
    /// The values, in output order.
    fn into_outputs(self) -> Vec<Value>;
}

impl IntoOutputs for Var<'_> {
    fn into_outputs(self) -> Vec<Value> {
        vec![self.value()]
    }
}

impl IntoOutputs for Value {
    fn into_outputs(self) -> Vec<Value> {
        vec![self]
    }
}

macro_rules! tuple_outputs {
    ($($t:ident),*) => {
        impl<$($t: Into<Value>),*> IntoOutputs for ($($t,)*) {
            #[allow(non_snake_case)]
            fn into_outputs(self) -> Vec<Value> {
                let ($($t,)*) = self;
                vec![$($t.into()),*]
            }
        }
    };
}
tuple_outputs!(A, B);
tuple_outputs!(A, B, C);
tuple_outputs!(A, B, C, D);

#![doc = include_str!("MALFORMED.md")]

use super::proto::ValueInfoProto;

/// The largest element type code ONNX defines (onnx 1.23: `FLOAT8E8M0` .. `INT2`
/// end at 28).
pub(crate) const MAX_ELEM_TYPE: i32 = 28;

/// True when `code` is an element type ONNX defines (`UNDEFINED`, 0, is not one),
/// whether or not graphrw has it.
pub(crate) fn elem_type_defined(code: i32) -> bool {
    (1..=MAX_ELEM_TYPE).contains(&code)
}

/// What is wrong with a graph input's declared tensor type when its element type is
/// not one ONNX defines; `None` when it is (or the input is no tensor).
pub(crate) fn input_elem_type(vi: &ValueInfoProto) -> Option<String> {
    let tt = vi.r#type.as_ref()?.tensor_type.as_ref()?;
    (!elem_type_defined(tt.elem_type)).then(|| match tt.elem_type {
        0 => "element type UNDEFINED (0): a graph input needs a defined element type".into(),
        t => format!("element type {t} is not an ONNX element type (1 to {MAX_ELEM_TYPE})"),
    })
}

/// Checks an Einsum equation against the spec, for a node of `inputs` operands: only
/// letters, `,`, `...` and one `->`; one term per operand; in explicit mode each output
/// letter appears once, and in some operand. Whether graphrw lowers it is decided later.
pub(crate) fn einsum_equation(eq: &str, inputs: usize) -> Result<(), String> {
    if eq.is_empty() {
        return Err("attribute `equation` is required".into());
    }
    if let Some(c) = eq
        .chars()
        .find(|c| !(c.is_ascii_alphabetic() || matches!(c, ',' | '.' | '-' | '>')))
    {
        return Err(format!("equation `{eq}` has the character `{c}`"));
    }
    let (lhs, out) = match eq.split_once("->") {
        Some((l, o)) => (l, Some(o)),
        None => (eq, None),
    };
    let arrows = |t: &str| t.contains('-') || t.contains('>');
    if arrows(lhs) || out.is_some_and(arrows) {
        return Err(format!("equation `{eq}` has a `-` or `>` outside one `->`"));
    }
    let terms: Vec<&str> = lhs.split(',').collect();
    for t in terms.iter().copied().chain(out) {
        let dots = t.matches('.').count();
        if !(dots == 0 || dots == 3 && t.contains("...")) {
            return Err(format!("term `{t}` of `{eq}`: dots only as one `...`"));
        }
    }
    if terms.len() != inputs {
        return Err(format!(
            "equation `{eq}` has {} operand terms for {inputs} inputs",
            terms.len()
        ));
    }
    if let Some(out) = out {
        let mut seen = Vec::new();
        for c in out.chars().filter(char::is_ascii_alphabetic) {
            if seen.contains(&c) {
                return Err(format!("output `{out}` of `{eq}` repeats `{c}`"));
            }
            if !lhs.contains(c) {
                return Err(format!("output letter `{c}` of `{eq}` is in no operand"));
            }
            seen.push(c);
        }
        if out.contains("...") && !lhs.contains("...") {
            return Err(format!(
                "output `{out}` of `{eq}` has `...` but no operand does"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn einsum_equations() {
        assert_eq!(einsum_equation("bhqd,bhkd->bhqk", 2), Ok(()));
        assert_eq!(einsum_equation("...id,...jd->...ij", 2), Ok(()));
        assert_eq!(einsum_equation("ij,jk", 2), Ok(()));
        assert_eq!(einsum_equation("ii->i", 1), Ok(()));
        for (eq, n) in [
            ("ij,jk->iz", 2),
            ("ij,jk->ii", 2),
            ("ij,jk->ik", 3),
            ("i#,jk->ik", 2),
            ("ij->i->j", 1),
            ("i..j->i", 1),
            ("", 1),
        ] {
            assert!(einsum_equation(eq, n).is_err(), "{eq}");
        }
        assert!(elem_type_defined(1) && elem_type_defined(8) && elem_type_defined(28));
        assert!(!elem_type_defined(0) && !elem_type_defined(99) && !elem_type_defined(-1));
    }
}

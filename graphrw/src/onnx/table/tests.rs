//! Unit tests of the ONNX table: its rows against the vocabulary and the schemas.

use super::*;
use crate::ops::{self, Arity, AttrKind};

/// Every row names a vocabulary op, operands it can take, and attributes it has
/// with an ONNX kind that converts to the attribute's kind.
#[test]
fn rows_follow_the_vocabulary() {
    for r in OPS {
        let def = r.op;
        assert!(
            ops::lookup(def.name).is_some_and(|d| std::ptr::eq(d, def)),
            "{}: `{}` is not the vocabulary's",
            r.onnx,
            def.name
        );
        let (lo, hi) = def.operand_range();
        let variadic = def.operands.iter().any(|o| o.arity == Arity::Variadic);
        if r.fold {
            assert_eq!((lo, hi), (2, Some(2)), "{}: folds into a binary op", r.onnx);
        } else {
            assert!(
                r.operands.0 >= lo,
                "{}: too few operands for {}",
                r.onnx,
                def.name
            );
            match hi {
                Some(hi) => assert!(r.operands.1 <= hi, "{}: too many operands", r.onnx),
                None => assert!(variadic && r.operands.1 == usize::MAX, "{}", r.onnx),
            }
        }
        for a in r.args {
            let spec = def
                .attrs
                .iter()
                .find(|s| s.name == a.ours)
                .unwrap_or_else(|| panic!("{}: `{}` has no `{}`", r.onnx, def.name, a.ours));
            let fits = matches!(
                (a.kind, spec.kind),
                (
                    OnnxKind::Int,
                    AttrKind::Int | AttrKind::Bool | AttrKind::DType
                ) | (OnnxKind::Ints, AttrKind::Ints)
                    | (OnnxKind::Float, AttrKind::Float)
                    | (OnnxKind::Str, AttrKind::Str)
            );
            assert!(
                fits,
                "{}: `{}` is {:?} in ONNX, {} in graphrw",
                r.onnx, a.onnx, a.kind, spec.kind
            );
        }
        assert!(
            r.opsets.0 <= r.opsets.1 && r.opsets.1 <= MAX_OPSET,
            "{}",
            r.onnx
        );
    }
}

/// Every attribute-to-input move of the table is one the upgrader of opaque nodes
/// (`upgrade.rs`) knows too, at the same opset and input.
#[test]
fn moves_agree_with_the_upgrader() {
    let mut moves = 0;
    for r in OPS {
        for a in r.args {
            if let Place::Moved { input, at } = a.place {
                moves += 1;
                let steps = super::super::upgrade::attr_to_input(r.onnx, at)
                    .unwrap_or_else(|| panic!("{}-{at}: the upgrader has no step", r.onnx));
                let ints = a.kind == OnnxKind::Ints;
                assert!(
                    steps.contains(&(a.onnx, input, ints)),
                    "{}-{at}: `{}` to input {input} is not the upgrader's {steps:?}",
                    r.onnx,
                    a.onnx
                );
            }
        }
    }
    assert!(moves >= 4, "only {moves} moves");
}

/// Every change of an op's meaning (a barrier of `schemas.rs`) inside a row's
/// opsets is one the row reads: an argument that moves there, legacy broadcasting
/// (7, the row's quirk), `consumed_inputs` dropped (6: graphrw never reads it, so
/// an older node that has it stays opaque), or Concat's `axis` made required (4:
/// the row requires it). A row stretched over another change fails here.
#[test]
fn rows_read_every_change_inside_their_opsets() {
    for r in OPS.iter().filter(|r| r.dir != Dir::Save) {
        let Some(barriers) = super::super::schemas::barriers(r.onnx, r.opsets.0, r.opsets.1) else {
            panic!("{} is not a standard op at {:?}", r.onnx, r.opsets);
        };
        for b in barriers {
            let moved = r
                .args
                .iter()
                .any(|a| matches!(a.place, Place::Moved { at, .. } if at == b));
            let read = moved
                || (b == 7 && r.quirk == Quirk::LegacyBroadcast)
                || b == 6
                || (b == 4 && r.onnx == "Concat");
            assert!(
                read,
                "{} changes meaning at {b}, inside {:?}",
                r.onnx, r.opsets
            );
        }
    }
}

/// The exporter picks an argument's place at the opset it has when it writes the
/// node, and the opset only grows afterwards: every move must be at or below the
/// base opset so that the place cannot change later.
#[test]
fn moves_are_settled_at_the_base_opset() {
    for r in OPS {
        for a in r.args {
            if let Place::Moved { at, .. } = a.place {
                assert!(
                    at <= BASE,
                    "{}: `{}` moves at {at} > {BASE}",
                    r.onnx,
                    a.onnx
                );
            }
        }
    }
}

/// Each vocabulary op is written by at most one row, and each ONNX op and opset is
/// read by rows that a held attribute tells apart.
#[test]
fn rows_do_not_overlap() {
    for (i, r) in OPS.iter().enumerate() {
        for s in &OPS[i + 1..] {
            if r.dir != Dir::Load && s.dir != Dir::Load {
                assert_ne!(r.op.name, s.op.name, "two rows write `{}`", r.op.name);
            }
            let both_load = r.dir != Dir::Save && s.dir != Dir::Save;
            let overlap = r.opsets.0 <= s.opsets.1 && s.opsets.0 <= r.opsets.1;
            if both_load && overlap && r.onnx == s.onnx {
                assert!(!r.held.is_empty(), "two rows read `{}`", r.onnx);
            }
        }
    }
}

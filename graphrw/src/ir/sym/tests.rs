//! Unit tests of the algebra's normal forms.

use super::*;

fn s(n: &str) -> SymExpr {
    SymExpr::sym(n)
}
fn k(n: i64) -> SymExpr {
    SymExpr::int(n)
}

#[test]
fn equal_sums_compare_equal_whatever_their_order() {
    let a = s("past").add(&s("seq")).unwrap().add(&k(1)).unwrap();
    let b = k(1).add(&s("seq")).unwrap().add(&s("past")).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.to_string(), "past + seq + 1");
    assert_eq!(a.sub(&s("past")).unwrap().sub(&k(1)).unwrap(), s("seq"));
    assert_eq!(a.sub(&a).unwrap().as_const(), Some(0));
}

#[test]
fn products_distribute_and_divide_back() {
    let bs = s("batch").mul(&s("seq")).unwrap();
    let numel = bs.mul(&k(768)).unwrap();
    assert_eq!(numel.to_string(), "batch*seq*768");
    let part = bs.mul(&k(12)).unwrap();
    assert_eq!(numel.div_floor(&k(64)).unwrap(), bs.mul(&k(12)).unwrap());
    // A symbolic divisor may be 0: its quotient needs bounds that make it at least 1.
    assert_eq!(numel.div_floor(&part), None);
    assert_eq!(numel.div_floor(&s("seq")), None);
    let sizes = bounds::Bounds::new()
        .at_least("batch", 1)
        .at_least("seq", 1);
    let ((whole, by_seq, not_exact), _) = in_force::with(&sizes, || {
        (
            numel.div_floor(&part),
            numel.div_floor(&s("seq")),
            // A divisor that does not divide every term: no exact quotient.
            numel.add(&k(1)).unwrap().div_floor(&s("seq")),
        )
    });
    assert_eq!(whole, Some(k(64)));
    assert_eq!(by_seq, s("batch").mul(&k(768)));
    assert!(not_exact.is_none());
    let sq = s("seq")
        .add(&k(1))
        .unwrap()
        .mul(&s("seq").add(&k(1)).unwrap())
        .unwrap();
    assert_eq!(sq.to_string(), "seq*2 + seq*seq + 1");
}

#[test]
fn floor_division_by_a_constant_is_an_atom_unless_it_divides() {
    let h = s("seq").div_floor(&k(2)).unwrap();
    assert_eq!(h.to_string(), "seq // 2");
    assert_eq!(h.eval(&|_| Some(7)), Ok(3));
    let e = s("seq")
        .scale(4)
        .unwrap()
        .add(&k(6))
        .unwrap()
        .div_floor(&k(4))
        .unwrap();
    // floor((4 seq + 6) / 4) = seq + 1 (6 // 4)
    assert_eq!(e, s("seq").add(&k(1)).unwrap());
    assert_eq!(k(-7).div_floor(&k(2)).unwrap(), k(-4));
    assert_eq!(k(7).div_floor(&k(-2)).unwrap(), k(-4));
    assert!(k(7).div_floor(&k(0)).is_none());
    assert_eq!(s("seq").rem_const(2).unwrap().eval(&|_| Some(7)), Ok(1));
}

#[test]
fn min_and_max_decide_what_the_signs_decide() {
    let seq = s("seq");
    let seq1 = seq.add(&k(1)).unwrap();
    assert_eq!(seq.minimum(&seq1).unwrap(), seq);
    assert_eq!(seq.maximum(&seq1).unwrap(), seq1);
    assert_eq!(seq.maximum(&k(0)).unwrap(), seq, "sizes are never negative");
    let m = seq.minimum(&k(512)).unwrap();
    assert_eq!(m.to_string(), "min(seq, 512)");
    assert_eq!(m, k(512).minimum(&seq).unwrap(), "min is symmetric");
    assert_eq!(m.eval(&|_| Some(600)), Ok(512));
    assert_eq!(seq.equals(&k(-1)), Some(false));
    assert_eq!(
        seq.equals(&s("past")),
        None,
        "two symbols are not assumed equal"
    );
}

#[test]
fn nested_floor_divisions_and_common_factors_have_one_form() {
    let two_s_plus_2 = s("s").scale(2).unwrap().add(&k(2)).unwrap();
    let s_plus_1 = s("s").add(&k(1)).unwrap();
    assert_eq!(
        two_s_plus_2.div_floor(&k(4)).unwrap(),
        s_plus_1.div_floor(&k(2)).unwrap()
    );
    assert_eq!(
        two_s_plus_2.div_floor(&k(4)).unwrap().to_string(),
        "(s + 1) // 2"
    );
    let quarter = s("s").div_floor(&k(2)).unwrap().div_floor(&k(2)).unwrap();
    assert_eq!(quarter, s("s").div_floor(&k(4)).unwrap());
    // With a term beside the inner division: (s // 2 + t) // 3 = (s + 2t) // 6.
    let e = s("s").div_floor(&k(2)).unwrap().add(&s("t")).unwrap();
    let flat = s("s").add(&s("t").scale(2).unwrap()).unwrap();
    assert_eq!(e.div_floor(&k(3)).unwrap(), flat.div_floor(&k(6)).unwrap());
    // A factor of the divisor and of every coefficient but the constant's:
    // (2s + 1) // 4 is s // 2, (3s + 5) // 6 is (s + 1) // 2.
    let odd = s("s")
        .scale(2)
        .unwrap()
        .add(&k(1))
        .unwrap()
        .div_floor(&k(4));
    assert_eq!(odd.unwrap(), s("s").div_floor(&k(2)).unwrap());
    let e = s("s")
        .scale(3)
        .unwrap()
        .add(&k(5))
        .unwrap()
        .div_floor(&k(6));
    assert_eq!(e.unwrap(), s_plus_1.div_floor(&k(2)).unwrap());
    // Coefficients past the divisor come out: (5s) // 4 is s + s // 4.
    let five = s("s").scale(5).unwrap().div_floor(&k(4)).unwrap();
    assert_eq!(five.to_string(), "s + s // 4");
    // Terms with no common factor stay: (2s + t) // 4.
    let mixed = s("s")
        .scale(2)
        .unwrap()
        .add(&s("t"))
        .unwrap()
        .div_floor(&k(4));
    assert_eq!(mixed.unwrap().to_string(), "(s*2 + t) // 4");
}

#[test]
fn min_and_max_are_n_ary_flat_and_sorted() {
    let (a, b, c) = (s("a"), s("b"), s("c"));
    let left = a.minimum(&b).unwrap().minimum(&c).unwrap();
    let right = a.minimum(&b.minimum(&c).unwrap()).unwrap();
    let swapped = c.minimum(&a).unwrap().minimum(&b).unwrap();
    assert_eq!(left, right);
    assert_eq!(left, swapped);
    assert_eq!(left.to_string(), "min(a, b, c)");
    // A member another provably beats goes: min(a, a + 1, b) = min(a, b).
    let a1 = a.add(&k(1)).unwrap();
    assert_eq!(
        SymExpr::extreme_of(&[a.clone(), a1.clone(), b.clone()], true).unwrap(),
        a.minimum(&b).unwrap()
    );
    assert_eq!(
        SymExpr::extreme_of(&[a.clone(), a1.clone(), b.clone()], false).unwrap(),
        a1.maximum(&b).unwrap()
    );
    // Repeats and one member.
    assert_eq!(
        SymExpr::extreme_of(&[b.clone(), b.clone()], true).unwrap(),
        b
    );
    assert!(SymExpr::extreme_of(&[], true).is_none());
    // Constants last, and only the smallest kept.
    let m = SymExpr::extreme_of(&[k(512), a.clone(), k(128)], true).unwrap();
    assert_eq!(m.to_string(), "min(a, 128)");
    let n = a.maximum(&b).unwrap().maximum(&c).unwrap();
    assert_eq!(n.eval(&|x| Some(if x == "b" { 9 } else { 2 })), Ok(9));
}

#[test]
fn evaluation_binds_symbols_and_reports_what_is_missing() {
    let e = s("past").add(&s("seq").scale(3).unwrap()).unwrap();
    let env = |n: &str| match n {
        "past" => Some(5),
        "seq" => Some(2),
        _ => None,
    };
    assert_eq!(e.eval(&env), Ok(11));
    assert_eq!(s("x").eval(&env), Err(EvalError::Unbound(symbol("x"))));
    let huge = s("seq").scale(i64::MAX / 2).unwrap();
    assert_eq!(huge.eval(&|_| Some(4)), Err(EvalError::Overflow));
    assert_eq!(e.symbols().len(), 2);
}

#[test]
fn overflow_and_blow_up_give_none() {
    assert!(k(i64::MAX).add(&k(1)).is_none());
    assert!(k(i64::MIN).neg().is_none());
    let mut e = s("a0");
    for i in 1..MAX_TERMS + 2 {
        match e.add(&s(&format!("a{i}"))) {
            Some(n) => e = n,
            None => return,
        }
    }
    panic!("an expression of more than {MAX_TERMS} terms was built");
}

#[test]
fn substitution_simplifies() {
    let e = s("a").sub(&s("b")).unwrap().div_floor(&k(2)).unwrap();
    let b_is_a = e.substitute(&|n| (n == "b").then(|| s("a"))).unwrap();
    assert_eq!(b_is_a.as_const(), Some(0));
}

#[test]
fn broadcast_is_flat_sorted_and_bound_at_run_time() {
    let (p1, seq) = (s("past").add(&k(1)).unwrap(), s("seq"));
    let b = SymExpr::broadcast(&[p1.clone(), seq.clone()]).unwrap();
    assert_eq!(b.to_string(), "broadcast(past + 1, seq)");
    assert_eq!(SymExpr::parse(&b.to_string()), Some(b.clone()));
    // One form: order, nesting, repeats and 1s do not matter.
    let again = SymExpr::broadcast(&[seq.clone(), k(1), b.clone(), p1.clone()]).unwrap();
    assert_eq!(again, b);
    // Equal, 1 and a constant decide it.
    assert_eq!(
        SymExpr::broadcast(&[seq.clone(), seq.clone()]),
        Some(seq.clone())
    );
    assert_eq!(SymExpr::broadcast(&[seq.clone(), k(1)]), Some(seq.clone()));
    assert_eq!(SymExpr::broadcast(&[seq.clone(), k(7)]), Some(k(7)));
    assert_eq!(SymExpr::broadcast(&[k(3), k(7)]), None);
    assert_eq!(SymExpr::broadcast(&[k(1), k(1)]), Some(k(1)));
    // Bound: the one that is not 1; two that differ have no value.
    let env = |p: i64, q: i64| move |n: &str| Some(if n == "past" { p } else { q });
    assert_eq!(b.eval(&env(4, 1)), Ok(5));
    assert_eq!(b.eval(&env(0, 9)), Ok(9));
    assert_eq!(b.eval(&env(4, 5)), Ok(5));
    assert_eq!(b.eval(&env(4, 3)), Err(EvalError::Broadcast(vec![5, 3])));
    // broadcast(0, 1) is 0, not the larger.
    let z = SymExpr::broadcast(&[s("a"), s("b")]).unwrap();
    assert_eq!(z.eval(&|n| Some(if n == "a" { 0 } else { 1 })), Ok(0));
    // Substitution simplifies: seq = 1 leaves past + 1; seq = past + 1 leaves it.
    let one = b.substitute(&|n| (n == "seq").then(|| k(1))).unwrap();
    assert_eq!(one, p1);
    let same = b.substitute(&|n| (n == "seq").then(|| p1.clone())).unwrap();
    assert_eq!(same, p1);
    // A size: never negative where it has a value.
    assert_eq!(b.sign(), Sign::NonNegative);
}

//! Unit tests: the tree built for several patterns is exactly the expected one, and the
//! rule-set relations (subsumption, overlap) hold where they should.

use super::analysis::analyse;
use super::error::Errors;
use super::ir::{AttrPattern, Ir, Lit, Node};
use super::lower::lower;
use super::overlap::{overlaps, subsumes};
use super::parse::PatternInput;

fn ir(src: &str) -> Ir {
    let input: PatternInput = syn::parse_str(src).expect("parses");
    let mut errs = Errors::default();
    let ir = analyse(&input.fns[0], &mut errs);
    if let Some(e) = errs.take() {
        panic!("{e}");
    }
    ir.expect("no errors")
}

/// A compact rendering of the node array.
fn render(ir: &Ir) -> Vec<String> {
    ir.nodes
        .iter()
        .map(|n| match n {
            Node::Any => "_".into(),
            Node::Tensor(p) => format!("T{p}"),
            Node::ConstValue(v) => format!("C{v}"),
            Node::ConstParam(p) => format!("CP{p}"),
            Node::Hole(r) => format!("H{r}"),
            Node::Alt(bs) => format!("Alt{bs:?}"),
            Node::Repeat {
                body,
                base,
                min,
                max,
            } => format!("Rep(body={body},base={base},{min}..={max})"),
            Node::Op(o) => {
                let attrs: Vec<String> = o
                    .attrs
                    .iter()
                    .map(|a| match &a.pat {
                        AttrPattern::Lit(Lit::Int(v)) => format!("{v}"),
                        AttrPattern::Lit(l) => format!("{l:?}"),
                        AttrPattern::Param(p) => format!("P{p}"),
                        AttrPattern::OneOf(ls) => format!("{ls:?}"),
                    })
                    .collect();
                format!(
                    "{}{:?}{}{} slot={:?}",
                    o.op.key(),
                    o.operands,
                    if o.more { "+" } else { "" },
                    if attrs.is_empty() {
                        String::new()
                    } else {
                        format!(" [{}]", attrs.join(","))
                    },
                    o.slot
                )
            }
        })
        .collect()
}

#[test]
fn sfdp_1_tree() {
    let ir = ir(
        "fn sfdp_1(query: Tensor, key: Tensor, value: Tensor, inv_scale: f64) -> Tensor {
        query.matmul(key.transpose(-2, -1)).div(inv_scale).softmax(-1).matmul(value)
    }",
    );
    assert_eq!(
        render(&ir),
        [
            "T0",
            "T1",
            "transpose[1] [-2,-1] slot=Some(4)",
            "matmul[0, 2] slot=Some(5)",
            "CP3",
            "div[3, 4] slot=Some(6)",
            "softmax[5] [-1] slot=Some(7)",
            "T2",
            "matmul[6, 7] slot=Some(8)",
        ]
    );
    assert_eq!(ir.roots, [8]);
    let low = lower(&ir);
    assert_eq!(low.op_count, 5);
    assert_eq!(
        low.anchors.iter().map(|a| a.key()).collect::<Vec<_>>(),
        ["matmul"]
    );
}

#[test]
fn alternatives_repeat_defaults_and_lets() {
    let ir1 = ir("fn p(x: Tensor, s: f64) -> Tensor { x.div(s) | x.mul(s) }");
    assert_eq!(
        render(&ir1),
        [
            "T0",
            "CP1",
            "div[0, 1] slot=Some(2)",
            "T0",
            "CP1",
            "mul[3, 4] slot=Some(3)",
            "Alt[2, 5]"
        ]
    );
    let ir2 = ir("fn p(x: Tensor) -> Tensor { repeat(x, |t| t.add(_), 1..=4).relu() }");
    assert_eq!(
        render(&ir2),
        [
            "Rep(body=3,base=4,1..=4)",
            "H0",
            "_",
            "add[1, 2] slot=None",
            "T0",
            "relu[0] slot=Some(1)"
        ]
    );
    // Omitted attributes match their defaults; `..` leaves them open.
    let ir3 = ir("fn p(x: Tensor) -> Tensor { x.sum() }");
    assert_eq!(
        render(&ir3),
        ["T0", "sum[0] [Ints([]),Bool(false)] slot=Some(1)"]
    );
    let ir4 = ir("fn p(x: Tensor) -> Tensor { x.sum(..) }");
    assert_eq!(render(&ir4), ["T0", "sum[0]+ slot=Some(1)"]);
    // A `let` is one shared node.
    let ir5 = ir("fn p(x: Tensor) -> Tensor { let y = x.relu(); y.mul(y) }");
    assert_eq!(
        render(&ir5),
        ["T0", "relu[0] slot=Some(1)", "mul[1, 1] slot=Some(2)"]
    );
    // Tuple returns are several roots, linked through `x`.
    let ir6 = ir("fn p(x: Tensor) -> (Tensor, Tensor) { (x.relu(), x.sigmoid()) }");
    assert_eq!(ir6.roots, [1, 3]);
    assert_eq!(lower(&ir6).links, [None, Some((0, 1))]);
}

#[test]
fn subsumption_and_overlap() {
    let any = ir("fn a(x: Tensor) -> Tensor { x.softmax(_) }");
    let last = ir("fn b(x: Tensor) -> Tensor { x.softmax(-1) }");
    let first = ir("fn c(x: Tensor) -> Tensor { x.softmax(0) }");
    assert!(subsumes(&any, &last));
    assert!(!subsumes(&last, &any));
    assert!(overlaps(&last, &any));
    assert!(!overlaps(&last, &first));
    let mul_c = ir("fn d(x: Tensor) -> Tensor { x.mul(2.0) }");
    let mul_any = ir("fn e(x: Tensor, y: Tensor) -> Tensor { x.mul(y) }");
    let mul_swapped = ir("fn f(x: Tensor) -> Tensor { mul(2.0, x) }");
    assert!(subsumes(&mul_any, &mul_c));
    assert!(overlaps(&mul_c, &mul_swapped), "mul is commutative");
    let sq = ir("fn g(x: Tensor) -> Tensor { x.mul(x) }");
    assert!(
        !subsumes(&sq, &mul_any),
        "a repeated parameter is not general"
    );
}

//! A symbolic dim saved as an expression (`past + 1` in an ONNX `dim_param`) loads back
//! as that expression, so saving and loading keep the relations between dims: what
//! inference proved before the round trip it proves after it, with no assumption, and a
//! run checks the relation. Names exporters write that are not expressions stay plain
//! symbols.

use graphrw::exec::{plan, reference_stack};
use graphrw::meta::SymExpr;
use graphrw::onnx::{load_bytes, to_bytes};
use graphrw::{Builder, DType, Dim, Graph, Shape, Tensor, TensorMeta};

fn meta(dims: Vec<Dim>) -> TensorMeta {
    TensorMeta::new(DType::F32, Shape::from(dims))
}

fn expr(text: &str) -> Dim {
    Dim::from_expr(SymExpr::parse(text).expect("an expression")).expect("a size")
}

fn ones(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_f64_slice(DType::F32, shape, &vec![1.0; n]).expect("shape and data agree")
}

/// `m * concat(k, t)`: `m` is `[b, <mask>]`, `k` is `[b, past]`, `t` is `[b, 1]` (the
/// mask comes first, so a run binds `past` after reading it).
fn mask_times_cache(mask: Dim) -> Graph {
    let g = Builder::new();
    let m = g.input("m", meta(vec![Dim::sym("b"), mask]));
    let k = g.input("k", meta(vec![Dim::sym("b"), Dim::sym("past")]));
    let t = g.input("t", meta(vec![Dim::sym("b"), Dim::from(1usize)]));
    let cat = g.var(g.concat_with(&[k.value(), t.value()], 1).expect("concat"));
    let y = m.mul(cat).expect("mul");
    g.output(&[y]).expect("output");
    g.finish()
}

fn out_dim(g: &Graph) -> Dim {
    g.meta(g.outputs()[0]).expect("output meta").shape.dims()[1].clone()
}

#[test]
fn an_expression_dim_param_keeps_its_relation_through_save_and_load() {
    let g = mask_times_cache(expr("past + 1"));
    assert!(g.assumptions().is_empty());
    let back = load_bytes(&to_bytes(&g).expect("saves")).expect("loads");
    assert!(
        back.assumptions().is_empty(),
        "nothing to assume: {:?}",
        back.assumptions()
    );
    assert_eq!(out_dim(&back), expr("past + 1"));
    let p = plan(&back, &reference_stack()).expect("plan");
    let (out, _) = p
        .run(&[ones(&[2, 4]), ones(&[2, 3]), ones(&[2, 1])])
        .expect("runs");
    assert_eq!(out[0].shape(), &[2, 4]);
    // A mask one longer than the cache plus one breaks the relation the file says.
    let err = p
        .run(&[ones(&[2, 5]), ones(&[2, 3]), ones(&[2, 1])])
        .expect_err("a mask of the wrong length");
    let msg = err.to_string();
    assert!(msg.contains("past + 1") && msg.contains('m'), "{msg}");
}

#[test]
fn names_that_are_not_expressions_over_bound_symbols_stay_symbols() {
    for name in [
        "Concatpast_sequence_length+1_dim_2",
        "unk__7",
        "batch size",
        // An expression over a symbol no input's dim binds: nothing could evaluate it.
        "other + 1",
        &format!("{}past{}", "(".repeat(100_000), ")".repeat(100_000)),
    ] {
        let g = mask_times_cache(Dim::sym(name));
        let back = load_bytes(&to_bytes(&g).expect("saves")).expect("loads");
        let input = back.node(back.inputs()[0]).expect("input node");
        assert_eq!(
            input.outputs()[0].shape.dims()[1],
            Dim::sym(name),
            "{}",
            &name[..name.len().min(40)]
        );
    }
}

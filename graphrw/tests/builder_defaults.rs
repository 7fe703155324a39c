//! The builder's short methods (`g.gelu(x)`) take each attribute's default from the op
//! table, as a pattern's call does; the `_with` methods take every attribute.

use graphrw::{Builder, DType, Graph, TensorMeta, Value};

/// The attributes of the node that made `v`, and whether each equals its op's default.
fn attrs_are_defaults(graph: &Graph, v: Value) -> Vec<(String, bool)> {
    let node = graph.node(v.node).expect("node exists");
    node.op()
        .attrs
        .iter()
        .zip(node.attr_values())
        .map(|(spec, value)| {
            let default = spec.default.value();
            (spec.name.to_string(), default.as_ref() == Some(value))
        })
        .collect()
}

#[test]
fn short_methods_take_every_default_from_the_op_table() {
    let g = Builder::new();
    let x = g.input("x", TensorMeta::new(DType::F32, [2usize, 4, 8]));
    let q = g.input("q", TensorMeta::new(DType::F32, [1usize, 2, 4, 8]));
    let values = [
        x.gelu().unwrap().value(),
        x.sum().unwrap().value(),
        x.mean().unwrap().value(),
        x.slice().unwrap().value(),
        x.tril().unwrap().value(),
        x.dropout().unwrap().value(),
        g.layer_norm(x, None, None).unwrap(),
        g.ones(&[2, 3]).unwrap(),
        g.arange(5.0).unwrap(),
        q.scaled_dot_product_attention(q, q, None).unwrap().value(),
    ];
    let graph = g.finish();
    for v in values {
        let attrs = attrs_are_defaults(&graph, v);
        let op = graph.node(v.node).unwrap().op().name;
        // Required attributes (`ones`' size, `arange`'s end) are given, not defaulted.
        let defaulted: Vec<_> = attrs
            .iter()
            .filter(|(name, _)| {
                !matches!((op, name.as_str()), ("ones", "size") | ("arange", "end"))
            })
            .collect();
        assert!(!defaulted.is_empty(), "{op} has defaults to test");
        for (name, is_default) in defaulted {
            assert!(is_default, "{op}: `{name}` is not its default");
        }
    }
}

#[test]
fn with_methods_take_every_attribute_in_the_op_order() {
    let g = Builder::new();
    let x = g.input("x", TensorMeta::new(DType::F32, [2usize, 4, 8]));
    let tanh = x.gelu_with("tanh").unwrap().value();
    let rows = x.sum_with(&[-1], true).unwrap().value();
    let cut = x.slice_with(-1, 1, 5, 2).unwrap().value();
    let ones = g.ones_with(&[3], DType::I64).unwrap();
    let graph = g.finish();
    let attr = |v: Value, name: &str| {
        let node = graph.node(v.node).unwrap();
        node.attrs().get(name).cloned()
    };
    assert_eq!(
        format!("{:?}", attr(tanh, "approximate")),
        "Some(Str(\"tanh\"))"
    );
    assert_eq!(graph.meta(rows).unwrap().shape.to_string(), "[2, 4, 1]");
    assert_eq!(graph.meta(cut).unwrap().shape.to_string(), "[2, 4, 2]");
    assert_eq!(graph.meta(ones).unwrap().dtype, DType::I64);
}

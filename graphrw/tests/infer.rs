//! Shape and dtype inference of every built-in op: good inputs give the expected
//! metadata, bad inputs are an `Err` naming the op and the shapes, never a panic.
// `&[x.clone()]` keeps each case one readable line; the clones are of tiny metadata.
#![allow(clippy::cloned_ref_to_slice_refs)]

use graphrw::meta::SymExpr;
use graphrw::ops::{self, AttrValue, OpClass};
use graphrw::{Builder, DType, Dim, Graph, GraphError, Shape, TensorMeta, Value};

fn f32s(dims: &[u64]) -> TensorMeta {
    TensorMeta::new(DType::F32, Shape::known(dims))
}

fn meta(dtype: DType, dims: &[u64]) -> TensorMeta {
    TensorMeta::new(dtype, Shape::known(dims))
}

/// Applies `op` to fresh inputs of the given metadata; returns the outputs' metadata.
fn infer(
    op: &str,
    inputs: &[TensorMeta],
    attrs: &[(&str, AttrValue)],
) -> Result<Vec<TensorMeta>, GraphError> {
    let def = ops::lookup(op).expect("built-in op");
    let b = Builder::new();
    let vals: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, m)| b.input(&format!("x{i}"), m.clone()).value())
        .collect();
    let outs = b.apply(def, &vals, attrs)?;
    outs.iter().map(|&v| b.meta(v)).collect()
}

fn ok1(op: &str, inputs: &[TensorMeta], attrs: &[(&str, AttrValue)]) -> TensorMeta {
    let mut v = infer(op, inputs, attrs).unwrap_or_else(|e| panic!("{op}: {e}"));
    assert_eq!(v.len(), 1, "{op} has one output");
    v.remove(0)
}

fn err(op: &str, inputs: &[TensorMeta], attrs: &[(&str, AttrValue)]) -> String {
    let e = infer(op, inputs, attrs)
        .expect_err("should be rejected")
        .to_string();
    assert!(e.contains(op), "message names the op `{op}`: {e}");
    e
}

fn int(v: i64) -> AttrValue {
    AttrValue::Int(v)
}
fn ints(v: &[i64]) -> AttrValue {
    AttrValue::Ints(v.to_vec())
}

#[test]
fn binary_elementwise_broadcast() {
    for op in ["add", "sub", "mul", "div", "maximum", "minimum"] {
        assert_eq!(
            ok1(op, &[f32s(&[2, 1, 4]), f32s(&[3, 1])], &[]),
            f32s(&[2, 3, 4])
        );
        assert_eq!(ok1(op, &[f32s(&[]), f32s(&[5])], &[]), f32s(&[5]));
        let e = err(op, &[f32s(&[2, 3]), f32s(&[4])], &[]);
        assert!(e.contains("[2, 3]") && e.contains("[4]"), "{e}");
        err(op, &[f32s(&[2]), meta(DType::F16, &[2])], &[]);
    }
    assert_eq!(ok1("pow", &[f32s(&[3]), f32s(&[])], &[]), f32s(&[3]));
    for op in ["eq", "ne", "lt", "le", "gt", "ge"] {
        assert_eq!(
            ok1(op, &[f32s(&[2, 3]), f32s(&[3])], &[]),
            meta(DType::Bool, &[2, 3])
        );
    }
    for op in ["and", "or"] {
        let b = meta(DType::Bool, &[4]);
        assert_eq!(ok1(op, &[b.clone(), b.clone()], &[]), b);
        err(op, &[f32s(&[4]), b], &[]);
    }
    err(
        "add",
        &[meta(DType::Bool, &[1]), meta(DType::Bool, &[1])],
        &[],
    );
}

#[test]
fn symbolic_dims_broadcast() {
    let s = TensorMeta::new(
        DType::F32,
        Shape::from(vec![Dim::sym("batch"), Dim::Known(4)]),
    );
    let one = f32s(&[1, 4]);
    assert_eq!(ok1("add", &[s.clone(), one], &[]), s);
    let known = f32s(&[3, 4]);
    assert_eq!(ok1("add", &[s, known.clone()], &[]), known);
}

fn sym(dims: &[&str]) -> TensorMeta {
    TensorMeta::new(
        DType::F32,
        dims.iter()
            .map(|d| match d.parse::<u64>() {
                Ok(n) => Dim::Known(n),
                Err(_) => Dim::sym(d),
            })
            .collect::<Shape>(),
    )
}

fn e(name: &str) -> SymExpr {
    SymExpr::sym(name)
}

/// Decoder steps exported by dynamo: `reshape(x, [-1, 1, 4, 16])` of `[batch, 1, 64]` is
/// `[batch, 1, 4, 16]`, not a fresh symbol, so the query's batch is the key's.
#[test]
fn reshape_infers_the_minus_one_as_an_expression() {
    let out = ok1(
        "reshape",
        &[sym(&["batch", "1", "64"])],
        &[("shape", AttrValue::Ints(vec![-1, 1, 4, 16]))],
    );
    assert_eq!(out, sym(&["batch", "1", "4", "16"]));
    let heads = ok1(
        "reshape",
        &[sym(&["batch", "seq", "768"])],
        &[(
            "shape",
            AttrValue::Dims(vec![
                e("batch"),
                e("seq"),
                SymExpr::int(12),
                SymExpr::int(-1),
            ]),
        )],
    );
    assert_eq!(heads, sym(&["batch", "seq", "12", "64"]));
    let merged = ok1(
        "reshape",
        &[sym(&["batch", "12", "seq", "64"])],
        &[("shape", AttrValue::Ints(vec![-1, 64]))],
    );
    assert_eq!(merged.shape.dims()[0].to_string(), "batch*seq*12");
    assert!(err(
        "reshape",
        &[sym(&["batch", "seq", "768"])],
        &[(
            "shape",
            AttrValue::Dims(vec![e("batch"), e("seq"), SymExpr::int(700)])
        )],
    )
    .contains("cannot reshape"));
}

/// Dynamo's `k.transpose(-2, -1)` over a cache: `reshape(k, [-1, past + new, 64])` of
/// `[batch, 32, past + new, 64]` merges the leading dims into `batch*32`: the target's
/// dims cancel against equal dims of the input before dividing, which dividing the
/// expanded element counts (a sum over a sum) cannot do.
#[test]
fn reshape_minus_one_cancels_equal_symbolic_dims() {
    let total = e("past").add(&e("new")).expect("past + new");
    let mut input = sym(&["batch", "32", "x", "64"]);
    input.shape.0[2] = Dim::from_expr(total.clone()).expect("a dim");
    let merged = ok1(
        "reshape",
        &[input.clone()],
        &[(
            "shape",
            AttrValue::Dims(vec![SymExpr::int(-1), total.clone(), SymExpr::int(64)]),
        )],
    );
    assert_eq!(merged.shape.dims()[0].to_string(), "batch*32");
    assert_eq!(merged.shape.dims()[1], input.shape.0[2]);
    // Split the other way: the -1 is the remaining symbolic product.
    let split = ok1(
        "reshape",
        &[merged],
        &[(
            "shape",
            AttrValue::Dims(vec![e("batch"), SymExpr::int(-1), total, SymExpr::int(64)]),
        )],
    );
    assert_eq!(split.shape.dims()[1], Dim::Known(32));
}

#[test]
fn sym_ints_is_an_i64_list_or_scalar() {
    let list = ok1(
        "sym_ints",
        &[],
        &[(
            "values",
            AttrValue::Dims(vec![e("batch"), e("seq").scale(12).expect("12 seq")]),
        )],
    );
    assert_eq!(list, meta(DType::I64, &[2]));
    let scalar = ok1(
        "sym_ints",
        &[],
        &[
            ("values", AttrValue::Dims(vec![e("seq")])),
            ("scalar", AttrValue::Bool(true)),
        ],
    );
    assert_eq!(scalar, meta(DType::I64, &[]));
    assert!(err(
        "sym_ints",
        &[],
        &[
            ("values", AttrValue::Ints(vec![1, 2])),
            ("scalar", AttrValue::Bool(true))
        ],
    )
    .contains("one value"));
}

#[test]
fn concat_of_a_cache_and_new_keys_is_their_sum() {
    let out = ok1(
        "concat",
        &[
            sym(&["batch", "4", "past", "16"]),
            sym(&["batch", "4", "1", "16"]),
        ],
        &[("dim", AttrValue::Int(2))],
    );
    assert_eq!(out.shape.dims()[2].to_string(), "past + 1");
    let chunk = ok1(
        "concat",
        &[
            sym(&["batch", "4", "past", "16"]),
            sym(&["batch", "4", "seq", "16"]),
        ],
        &[("dim", AttrValue::Int(2))],
    );
    let total = e("past").add(&e("seq")).expect("sum");
    assert_eq!(chunk.shape.dims()[2], Dim::from_expr(total).expect("a dim"));
}

#[test]
fn a_symbol_broadcasts_against_one_and_unrelated_dims_to_a_broadcast_dim() {
    let scores = sym(&["batch", "4", "seq", "16"]);
    assert_eq!(
        ok1(
            "add",
            &[scores.clone(), sym(&["batch", "1", "1", "16"])],
            &[]
        ),
        scores
    );
    let kv = ok1(
        "concat",
        &[sym(&["batch", "past"]), sym(&["batch", "seq"])],
        &[("dim", AttrValue::Int(1))],
    );
    // `seq` against `past + seq` may be 1 against n at run time (one new token against
    // the whole cache): a broadcast dim, no equality assumed.
    let b = ok1("add", &[sym(&["batch", "seq"]), kv.clone()], &[]);
    assert_eq!(b.shape.dims()[1].to_string(), "broadcast(past + seq, seq)");
    assert_eq!(b.shape.dims()[0], Dim::sym("batch"));
    // Two dims a constant apart can never broadcast (but at a size of 0): an error.
    let next = ok1(
        "concat",
        &[sym(&["batch", "seq"]), sym(&["batch", "1"])],
        &[("dim", AttrValue::Int(1))],
    );
    let msg = err("add", &[sym(&["batch", "seq"]), next], &[]);
    assert!(msg.contains("seq + 1"), "{msg}");
}

#[test]
fn symbolic_sources_slices_and_expands() {
    let full = ok1(
        "full",
        &[],
        &[
            ("size", AttrValue::Dims(vec![e("seq"), e("seq")])),
            ("value", AttrValue::Float(0.0)),
        ],
    );
    assert_eq!(full, sym(&["seq", "seq"]));
    let range = ok1(
        "arange",
        &[],
        &[
            ("end", AttrValue::Sym(e("seq"))),
            ("dtype", AttrValue::DType(DType::I64)),
        ],
    );
    assert_eq!(range.shape.dims(), &[Dim::sym("seq")]);
    let table = f32s(&[512, 64]);
    let rows = ok1(
        "slice",
        &[table],
        &[
            ("dim", AttrValue::Int(0)),
            ("start", AttrValue::Int(0)),
            ("end", AttrValue::Sym(e("seq"))),
        ],
    );
    assert_eq!(rows, sym(&["seq", "64"]));
    let last = ok1(
        "slice",
        &[sym(&["seq", "64"])],
        &[
            ("dim", AttrValue::Int(0)),
            ("start", AttrValue::Int(-1)),
            ("end", AttrValue::Int(i64::MAX)),
        ],
    );
    assert_eq!(last, sym(&["1", "64"]));
    let wide = ok1(
        "expand",
        &[sym(&["batch", "1", "1", "seq"])],
        &[(
            "size",
            AttrValue::Dims(vec![e("batch"), SymExpr::int(1), e("seq"), e("seq")]),
        )],
    );
    assert_eq!(wide, sym(&["batch", "1", "seq", "seq"]));
    assert!(err(
        "full",
        &[],
        &[
            ("size", AttrValue::Dims(vec![e("seq").neg().expect("neg")])),
            ("value", AttrValue::Float(0.0)),
        ],
    )
    .contains("negative"));
}

#[test]
fn unary_elementwise() {
    for op in [
        "neg",
        "abs",
        "reciprocal",
        "sqrt",
        "rsqrt",
        "exp",
        "log",
        "sin",
        "cos",
        "erf",
        "tanh",
        "sigmoid",
        "relu",
        "silu",
        "dropout",
        "contiguous",
        "tril",
        "triu",
        "gelu",
    ] {
        let m = meta(DType::BF16, &[2, 3]);
        assert_eq!(ok1(op, &[m.clone()], &[]), m, "{op}");
    }
    for op in [
        "reciprocal",
        "sqrt",
        "exp",
        "erf",
        "tanh",
        "sigmoid",
        "gelu",
        "isnan",
    ] {
        err(op, &[meta(DType::I64, &[2])], &[]);
    }
    assert_eq!(ok1("isnan", &[f32s(&[2])], &[]), meta(DType::Bool, &[2]));
    assert_eq!(
        ok1("not", &[meta(DType::Bool, &[2])], &[]),
        meta(DType::Bool, &[2])
    );
    err("not", &[f32s(&[2])], &[]);
    err("neg", &[meta(DType::Bool, &[2])], &[]);
    assert_eq!(
        ok1("cumsum", &[meta(DType::I64, &[2, 3])], &[("dim", int(1))]),
        meta(DType::I64, &[2, 3])
    );
}

#[test]
fn where_cast_masked_fill() {
    let c = meta(DType::Bool, &[1, 1, 4, 4]);
    assert_eq!(
        ok1("where", &[c.clone(), f32s(&[]), f32s(&[2, 1, 4, 4])], &[]),
        f32s(&[2, 1, 4, 4])
    );
    err("where", &[f32s(&[4]), f32s(&[4]), f32s(&[4])], &[]);
    err(
        "where",
        &[c.clone(), f32s(&[4]), meta(DType::F16, &[4])],
        &[],
    );
    assert_eq!(
        ok1(
            "cast",
            &[f32s(&[3])],
            &[("dtype", AttrValue::DType(DType::F16))]
        ),
        meta(DType::F16, &[3])
    );
    assert_eq!(
        ok1(
            "masked_fill",
            &[f32s(&[2, 1, 4, 4]), c.clone()],
            &[("value", AttrValue::Float(f64::NEG_INFINITY))]
        ),
        f32s(&[2, 1, 4, 4])
    );
    err(
        "masked_fill",
        &[f32s(&[4, 4]), c],
        &[("value", AttrValue::Float(0.0))],
    );
}

#[test]
fn matmul_rules() {
    assert_eq!(
        ok1("matmul", &[f32s(&[2, 3]), f32s(&[3, 4])], &[]),
        f32s(&[2, 4])
    );
    assert_eq!(ok1("matmul", &[f32s(&[3]), f32s(&[3])], &[]), f32s(&[]));
    assert_eq!(
        ok1("matmul", &[f32s(&[3]), f32s(&[5, 3, 4])], &[]),
        f32s(&[5, 4])
    );
    assert_eq!(
        ok1("matmul", &[f32s(&[5, 2, 3]), f32s(&[3])], &[]),
        f32s(&[5, 2])
    );
    assert_eq!(
        ok1("matmul", &[f32s(&[2, 1, 4, 8]), f32s(&[3, 8, 5])], &[]),
        f32s(&[2, 3, 4, 5])
    );
    let e = err("matmul", &[f32s(&[2, 3]), f32s(&[4, 5])], &[]);
    assert!(e.contains("inner"), "{e}");
    err("matmul", &[f32s(&[2, 2, 3]), f32s(&[3, 3, 4])], &[]);
    err("matmul", &[f32s(&[]), f32s(&[3])], &[]);
}

#[test]
fn conv2d_shapes() {
    let x = f32s(&[1, 4, 8, 8]);
    let w = f32s(&[6, 2, 3, 3]);
    let attrs = [("padding", ints(&[1, 1])), ("groups", int(2))];
    assert_eq!(
        ok1("conv2d", &[x.clone(), w.clone()], &attrs),
        f32s(&[1, 6, 8, 8])
    );
    assert_eq!(
        ok1("conv2d", &[x.clone(), w.clone(), f32s(&[6])], &attrs),
        f32s(&[1, 6, 8, 8])
    );
    err("conv2d", &[x.clone(), w.clone()], &[]);
    err("conv2d", &[f32s(&[4, 8, 8]), w], &[]);
}

#[test]
fn layout_ops() {
    let x = f32s(&[2, 3, 4]);
    assert_eq!(
        ok1(
            "transpose",
            &[x.clone()],
            &[("dim0", int(-2)), ("dim1", int(-1))]
        ),
        f32s(&[2, 4, 3])
    );
    err(
        "transpose",
        &[x.clone()],
        &[("dim0", int(3)), ("dim1", int(0))],
    );
    assert_eq!(
        ok1("permute", &[x.clone()], &[("dims", ints(&[2, 0, 1]))]),
        f32s(&[4, 2, 3])
    );
    err("permute", &[x.clone()], &[("dims", ints(&[0, 0, 1]))]);
    err("permute", &[x.clone()], &[("dims", ints(&[0, 1]))]);
    assert_eq!(
        ok1("reshape", &[x.clone()], &[("shape", ints(&[6, -1]))]),
        f32s(&[6, 4])
    );
    err("reshape", &[x.clone()], &[("shape", ints(&[5, -1]))]);
    err("reshape", &[x.clone()], &[("shape", ints(&[-1, -1]))]);
    err("reshape", &[x.clone()], &[("shape", ints(&[7]))]);
    assert_eq!(
        ok1("expand", &[f32s(&[3, 1])], &[("size", ints(&[2, -1, 5]))]),
        f32s(&[2, 3, 5])
    );
    err("expand", &[f32s(&[3, 2])], &[("size", ints(&[3, 5]))]);
    assert_eq!(
        ok1("unsqueeze", &[x.clone()], &[("dim", int(-1))]),
        f32s(&[2, 3, 4, 1])
    );
    assert_eq!(ok1("squeeze", &[f32s(&[1, 3, 1])], &[]), f32s(&[3]));
    assert_eq!(
        ok1("squeeze", &[f32s(&[1, 3, 1])], &[("dims", ints(&[0]))]),
        f32s(&[3, 1])
    );
    err("squeeze", &[f32s(&[2, 3])], &[("dims", ints(&[0]))]);
    assert_eq!(
        ok1(
            "slice",
            &[x.clone()],
            &[
                ("dim", int(2)),
                ("start", int(1)),
                ("end", int(100)),
                ("step", int(2))
            ]
        ),
        f32s(&[2, 3, 2])
    );
    assert_eq!(
        ok1(
            "slice",
            &[x.clone()],
            &[("dim", int(-1)), ("start", int(-2))]
        ),
        f32s(&[2, 3, 2])
    );
    err("slice", &[x.clone()], &[("step", int(0))]);
    let parts = infer(
        "split",
        &[x.clone()],
        &[("split_sizes", ints(&[1, 3])), ("dim", int(2))],
    )
    .unwrap();
    assert_eq!(parts, vec![f32s(&[2, 3, 1]), f32s(&[2, 3, 3])]);
    err(
        "split",
        &[x.clone()],
        &[("split_sizes", ints(&[1, 2])), ("dim", int(2))],
    );
}

#[test]
fn concat_shapes() {
    let b = Builder::new();
    let a = b.input("a", f32s(&[2, 3])).value();
    let c = b.input("c", f32s(&[2, 5])).value();
    let out = b.concat_with(&[a, c], 1).unwrap();
    assert_eq!(b.meta(out).unwrap(), f32s(&[2, 8]));
    let e = b.concat(&[a, c]).unwrap_err().to_string();
    assert!(e.contains("concat"), "{e}");
    assert!(b.concat(&[]).is_err());
}

#[test]
fn indexing_ops() {
    let table = f32s(&[10, 4]);
    let ids = meta(DType::I64, &[2, 3]);
    assert_eq!(
        ok1("gather", &[table.clone(), ids.clone()], &[]),
        f32s(&[2, 3, 4])
    );
    err("gather", &[table.clone(), f32s(&[2])], &[]);
    assert_eq!(
        ok1(
            "gather_elements",
            &[f32s(&[2, 5]), meta(DType::I64, &[2, 3])],
            &[("dim", int(1))]
        ),
        f32s(&[2, 3])
    );
    err(
        "gather_elements",
        &[f32s(&[2, 5]), meta(DType::I64, &[3])],
        &[],
    );
    assert_eq!(
        ok1(
            "gather_nd",
            &[f32s(&[2, 3, 4]), meta(DType::I64, &[5, 2])],
            &[]
        ),
        f32s(&[5, 4])
    );
    err(
        "gather_nd",
        &[f32s(&[2, 3]), meta(DType::I64, &[5, 3])],
        &[],
    );
    assert_eq!(
        ok1(
            "index_select",
            &[table.clone(), meta(DType::I32, &[7])],
            &[("dim", int(0))]
        ),
        f32s(&[7, 4])
    );
    err("index_select", &[table, ids], &[("dim", int(0))]);
}

#[test]
fn reductions_and_normalisation() {
    let x = f32s(&[2, 3, 4]);
    assert_eq!(ok1("sum", &[x.clone()], &[]), f32s(&[]));
    assert_eq!(
        ok1(
            "mean",
            &[x.clone()],
            &[("dims", ints(&[-1])), ("keepdim", AttrValue::Bool(true))]
        ),
        f32s(&[2, 3, 1])
    );
    assert_eq!(
        ok1("amax", &[x.clone()], &[("dims", ints(&[0, 2]))]),
        f32s(&[3])
    );
    err("sum", &[x.clone()], &[("dims", ints(&[3]))]);
    assert_eq!(ok1("softmax", &[x.clone()], &[("dim", int(-1))]), x);
    assert_eq!(ok1("log_softmax", &[x.clone()], &[("dim", int(0))]), x);
    err("softmax", &[meta(DType::I64, &[3])], &[("dim", int(0))]);
    assert_eq!(
        ok1("layer_norm", &[x.clone(), f32s(&[4]), f32s(&[4])], &[]),
        x
    );
    assert_eq!(ok1("rms_norm", &[x.clone(), f32s(&[4])], &[]), x);
    err("layer_norm", &[x.clone(), f32s(&[3])], &[]);
    assert_eq!(
        ok1(
            "layer_norm",
            &[x.clone(), f32s(&[3, 4])],
            &[("axis", int(1))]
        ),
        x
    );
}

#[test]
fn sources() {
    assert_eq!(
        ok1("arange", &[], &[("end", AttrValue::Float(5.0))]),
        meta(DType::I64, &[5])
    );
    assert_eq!(
        ok1(
            "arange",
            &[],
            &[
                ("start", AttrValue::Float(1.0)),
                ("end", AttrValue::Float(2.0)),
                ("step", AttrValue::Float(0.25)),
                ("dtype", AttrValue::DType(DType::F32))
            ]
        ),
        f32s(&[4])
    );
    err(
        "arange",
        &[],
        &[
            ("end", AttrValue::Float(5.0)),
            ("step", AttrValue::Float(0.0)),
        ],
    );
    assert_eq!(
        ok1(
            "full",
            &[],
            &[("size", ints(&[2, 2])), ("value", AttrValue::Float(1.5))]
        ),
        f32s(&[2, 2])
    );
    assert_eq!(
        ok1(
            "zeros",
            &[],
            &[
                ("size", ints(&[3])),
                ("dtype", AttrValue::DType(DType::I64))
            ]
        ),
        meta(DType::I64, &[3])
    );
    assert_eq!(ok1("ones", &[], &[("size", ints(&[0]))]), f32s(&[0]));
    err("ones", &[], &[("size", ints(&[-1]))]);
}

#[test]
fn attention() {
    let q = f32s(&[2, 8, 16, 64]);
    let kv = f32s(&[2, 2, 32, 64]);
    let gqa = [("enable_gqa", AttrValue::Bool(true))];
    assert_eq!(
        ok1(
            "scaled_dot_product_attention",
            &[q.clone(), kv.clone(), kv.clone()],
            &gqa
        ),
        q
    );
    let e = err(
        "scaled_dot_product_attention",
        &[q.clone(), kv.clone(), kv.clone()],
        &[],
    );
    assert!(e.contains("heads"), "{e}");
    let mask = meta(DType::Bool, &[2, 1, 16, 32]);
    assert_eq!(
        ok1(
            "scaled_dot_product_attention",
            &[q.clone(), kv.clone(), kv.clone(), mask],
            &gqa
        ),
        q
    );
    err(
        "scaled_dot_product_attention",
        &[
            q.clone(),
            kv.clone(),
            kv.clone(),
            meta(DType::Bool, &[2, 1, 16, 31]),
        ],
        &gqa,
    );
    err(
        "scaled_dot_product_attention",
        &[q.clone(), f32s(&[2, 8, 16, 32]), kv.clone()],
        &[],
    );
    err(
        "scaled_dot_product_attention",
        &[q.clone(), kv.clone(), kv],
        &[
            ("scale", AttrValue::Float(f64::NAN)),
            ("enable_gqa", AttrValue::Bool(true)),
        ],
    );
}

#[test]
fn attention_backward_and_cross_entropy() {
    let q = f32s(&[2, 8, 16, 64]);
    let kv = f32s(&[2, 2, 32, 64]);
    let gqa = [("enable_gqa", AttrValue::Bool(true))];
    let bwd = "scaled_dot_product_attention_backward";
    let outs = infer(
        bwd,
        &[q.clone(), q.clone(), kv.clone(), kv.clone(), q.clone()],
        &gqa,
    )
    .unwrap();
    assert_eq!(outs, vec![q.clone(), kv.clone(), kv.clone()]);
    let e = err(
        bwd,
        &[
            f32s(&[2, 8, 16, 63]),
            q.clone(),
            kv.clone(),
            kv.clone(),
            q.clone(),
        ],
        &gqa,
    );
    assert!(e.contains("grad_out"), "{e}");
    err(
        bwd,
        &[q.clone(), q.clone(), kv.clone(), kv.clone(), q.clone()],
        &[],
    );
    let logits = f32s(&[4, 10]);
    let target = meta(DType::I64, &[4]);
    assert_eq!(
        ok1("cross_entropy", &[logits.clone(), target.clone()], &[]),
        f32s(&[])
    );
    let none = [("reduction", AttrValue::Str("none".into()))];
    assert_eq!(
        ok1("cross_entropy", &[logits.clone(), target.clone()], &none),
        f32s(&[4])
    );
    let e = err(
        "cross_entropy",
        &[logits.clone(), meta(DType::I64, &[5])],
        &[],
    );
    assert!(e.contains("without the class dim"), "{e}");
    err("cross_entropy", &[logits.clone(), f32s(&[4])], &[]);
    let e = err(
        "cross_entropy",
        &[logits.clone(), target.clone()],
        &[("reduction", AttrValue::Str("max".into()))],
    );
    assert!(e.contains("reduction"), "{e}");
    assert_eq!(
        ok1(
            "cross_entropy_backward",
            &[f32s(&[4]), logits.clone(), target.clone()],
            &none
        ),
        logits
    );
    err("cross_entropy_backward", &[f32s(&[4]), logits, target], &[]);
}

#[test]
fn signature_errors() {
    let e = err("softmax", &[f32s(&[2])], &[]);
    assert!(e.contains("`dim` is required"), "{e}");
    let e = err("softmax", &[f32s(&[2])], &[("axis", int(0))]);
    assert!(
        e.contains("no attribute `axis`") && e.contains("dim"),
        "{e}"
    );
    let e = err("softmax", &[f32s(&[2])], &[("dim", AttrValue::Float(1.0))]);
    assert!(e.contains("should be int"), "{e}");
    let e = err("matmul", &[f32s(&[2])], &[]);
    assert!(e.contains("takes 2 operands"), "{e}");
    let e = err(
        "layer_norm",
        &[f32s(&[2]), f32s(&[2]), f32s(&[2]), f32s(&[2])],
        &[],
    );
    assert!(e.contains("1 to 3"), "{e}");
}

#[test]
fn every_op_is_covered_by_these_tests() {
    // Keeps this file honest: a new op in the table must get an inference test here.
    let source = include_str!("infer.rs");
    for op in ops::BUILTIN {
        if op.class == OpClass::Source && matches!(op.name, "input" | "constant") {
            continue;
        }
        assert!(
            source.contains(&format!("\"{}\"", op.name))
                || source.contains(&format!(".{}(", op.name)),
            "no inference test mentions `{}`",
            op.name
        );
    }
}

#[test]
fn huge_dims_are_errors_not_overflows() {
    let big = u64::MAX / 2 + 1;
    let e = err(
        "split",
        &[f32s(&[4])],
        &[("split_sizes", ints(&[i64::MAX, 2]))],
    );
    assert!(e.contains("overflow"), "{e}");
    let b = Builder::new();
    let a = b.input("a", f32s(&[big])).value();
    let e = b.concat(&[a, a]).unwrap_err().to_string();
    assert!(e.contains("concat") && e.contains("overflows"), "{e}");
    let w = f32s(&[1, 1, big, 1]);
    let x = f32s(&[1, 1, 4, 4]);
    assert!(infer("conv2d", &[x, w], &[("dilation", ints(&[i64::MAX, 1]))]).is_err());
}

#[test]
fn shapes_past_the_inline_rank_behave_like_short_ones() {
    // Shapes of up to `INLINE_RANK` dims are stored inline, longer ones on the heap;
    // neither is visible: construction, equality and inference agree across the two.
    let long: Vec<u64> = (1..=graphrw::INLINE_RANK as u64 + 2).collect();
    let from_vec = Shape::from(long.iter().map(|&d| Dim::Known(d)).collect::<Vec<_>>());
    let from_iter: Shape = long.iter().map(|&d| Dim::Known(d)).collect();
    assert_eq!(from_vec, Shape::known(&long));
    assert_eq!(from_iter, Shape::known(&long));
    assert_eq!(from_vec.rank(), long.len());
    assert_eq!(from_vec.numel(), Some(long.iter().product()));
    // Reshape from rank 2 to rank 6 and back, and a broadcast between rank 6 and 1.
    let n: u64 = long.iter().product();
    let target: Vec<i64> = long.iter().map(|&d| d as i64).collect();
    let six = ok1(
        "reshape",
        &[f32s(&[2, n / 2])],
        &[("shape", AttrValue::Ints(target))],
    );
    assert_eq!(six, f32s(&long));
    let back = ok1(
        "reshape",
        &[six.clone()],
        &[("shape", AttrValue::Ints(vec![n as i64]))],
    );
    assert_eq!(back, f32s(&[n]));
    let last = *long.last().unwrap();
    assert_eq!(ok1("add", &[six.clone(), f32s(&[last])], &[]), six);
}

#[test]
fn opaque_nodes_declare_their_metadata() {
    use graphrw::foreign::Foreign;
    let mut g = Graph::new();
    let x = g.add_input("x", TensorMeta::new(DType::F32, [2usize, 3]));
    // Inference cannot make one: an opaque op has no meaning to infer from.
    let e = g
        .add_op(
            ops::lookup("opaque").expect("opaque op"),
            &[x],
            &[
                ("op_type", AttrValue::Str("Mystery".into())),
                ("known", AttrValue::Ints(vec![1])),
            ],
        )
        .expect_err("declared metadata");
    assert!(e.to_string().contains("add_opaque"), "{e}");
    let foreign = Foreign {
        inputs: vec![true],
        outputs: vec![true, true],
        types: vec![None, Some(Vec::new())],
        ..Foreign::default()
    };
    let metas = vec![
        TensorMeta::new(DType::F16, [4usize]),
        TensorMeta::new(DType::F32, Shape::default()),
    ];
    let id = g.add_opaque(
        "Mystery",
        "com.example",
        vec![x],
        metas.clone(),
        foreign,
        None,
    );
    let node = g.node(id).expect("node");
    assert_eq!(node.outputs(), metas.as_slice());
    assert!(node.is_known(0));
    assert!(!node.is_known(1));
    g.set_outputs(vec![Value::new(id, 0)]).expect("outputs");
    graphrw::verify(&g).expect("an opaque node verifies");
}

//! Every op on integer inputs gives the dtype its metadata says, ONNX's (issue #53: a
//! TorchScript RoBERTa's position ids are a `CumSum` on int32, and the kernel gave int64
//! where the graph said int32, so the run failed).
//!
//! Each built-in op has a recipe here (a new op without one fails the first test). At
//! int32 and int64 each op is built from graph inputs; an op graphrw refuses on
//! integers must be one listed as such, and every other op runs on graphrw's reference
//! stack and its default stack (the interpreter checks each kernel's dtype against the
//! metadata), is saved, loaded back and run again, and, where onnxruntime is installed
//! (`$GRAPHRW_PYTHON`, else `../.venv`, else `python3`; `SKIPPED` without it, a failure
//! under `CI=true`), runs in onnxruntime with the same dtypes and values.

mod ort_support;

use graphrw::exec::{default_stack, plan, run_reference};
use graphrw::onnx::{load_bytes, to_bytes};
use graphrw::ops::{AttrValue, OpDef, BUILTIN};
use graphrw::{DType, Graph, Tensor, TensorMeta, Value};

/// An operand of a recipe, at the integer dtype `dt` under test.
#[derive(Clone, Copy, Debug)]
enum In {
    /// `dt` [2, 3, 4], values in -7..=7.
    A,
    /// `dt` [2, 3, 4], another pattern, none zero (a divisor).
    B,
    /// `dt` [2, 4, 3] (a matmul's right operand).
    Bt,
    /// `dt` [2, 3, 4], 0..=3 (an exponent).
    E,
    /// `dt` [2, 1, 4] (a dim to squeeze or broadcast).
    A1,
    /// bool [2, 3, 4].
    Mask,
    /// f32 [2, 3, 4], non-integral values in -8..8 (cast to `dt`).
    F,
    /// Indices of dim 1 (size 3), [2, 2], of this dtype.
    Idx(DType),
    /// `gather_elements` indices of dim 2, [2, 3, 2].
    IdxElems,
    /// `gather_nd` indices [2, 2] into the first two dims.
    IdxNd,
    /// `index_select` indices of dim 1, [2].
    Idx1,
}

impl In {
    fn tensor(self, dt: DType) -> Tensor {
        let f = |shape: &[usize], v: &dyn Fn(usize) -> f64, dt: DType| {
            let n: usize = shape.iter().product();
            let vals: Vec<f64> = (0..n).map(v).collect();
            Tensor::from_f64_slice(dt, shape, &vals).expect("tensor")
        };
        match self {
            In::A => f(&[2, 3, 4], &|i| ((i * 7 + 3) % 15) as f64 - 7.0, dt),
            In::B => f(
                &[2, 3, 4],
                &|i| match i % 2 {
                    0 => (1 + i % 4) as f64,
                    _ => -((1 + i % 3) as f64),
                },
                dt,
            ),
            In::Bt => f(&[2, 4, 3], &|i| ((i * 5) % 7) as f64 - 3.0, dt),
            In::E => f(&[2, 3, 4], &|i| (i % 4) as f64, dt),
            In::A1 => f(&[2, 1, 4], &|i| (i as f64) - 4.0, dt),
            In::Mask => f(&[2, 3, 4], &|i| ((i * 3) % 5 < 2) as u8 as f64, DType::Bool),
            In::F => f(&[2, 3, 4], &|i| (i as f64) * 0.63 - 7.7, DType::F32),
            In::Idx(it) => f(&[2, 2], &|i| ((i * 2) % 3) as f64, it),
            In::IdxElems => f(&[2, 3, 2], &|i| ((i * 3) % 4) as f64, DType::I64),
            In::IdxNd => f(&[2, 2], &|i| [1.0, 2.0, 0.0, 1.0][i], DType::I64),
            In::Idx1 => f(&[2], &|i| [2.0, 0.0][i], DType::I64),
        }
    }
}

/// How to build an op on integer inputs: operands, attributes (the dtype under test
/// where an attribute is `DType`), and whether graphrw takes integers there.
struct Recipe {
    op: &'static str,
    /// Shown in messages (an op may have several recipes).
    what: &'static str,
    ins: Vec<In>,
    attrs: Vec<(&'static str, Attr)>,
    ints: bool,
}

/// An attribute value; `Dt` is the dtype under test.
#[derive(Clone, Debug)]
enum Attr {
    V(AttrValue),
    Dt,
}

fn int(v: i64) -> Attr {
    Attr::V(AttrValue::Int(v))
}
fn ints(v: &[i64]) -> Attr {
    Attr::V(AttrValue::Ints(v.to_vec()))
}
fn float(v: f64) -> Attr {
    Attr::V(AttrValue::Float(v))
}
fn boolean(v: bool) -> Attr {
    Attr::V(AttrValue::Bool(v))
}
fn dtype(d: DType) -> Attr {
    Attr::V(AttrValue::DType(d))
}

fn r(op: &'static str, what: &'static str, ins: &[In], attrs: Vec<(&'static str, Attr)>) -> Recipe {
    Recipe {
        op,
        what,
        ins: ins.to_vec(),
        attrs,
        ints: true,
    }
}

/// An op graphrw does not define on integers (its inference refuses them).
fn refused(op: &'static str, ins: &[In], attrs: Vec<(&'static str, Attr)>) -> Recipe {
    Recipe {
        ints: false,
        ..r(op, op, ins, attrs)
    }
}

fn recipes() -> Vec<Recipe> {
    use In::*;
    let mut v = vec![
        // Sources.
        r(
            "arange",
            "arange",
            &[],
            vec![
                ("start", float(2.0)),
                ("end", float(11.0)),
                ("step", float(3.0)),
                ("dtype", Attr::Dt),
            ],
        ),
        r(
            "full",
            "full",
            &[],
            vec![
                ("size", ints(&[2, 3])),
                ("value", float(5.0)),
                ("dtype", Attr::Dt),
            ],
        ),
        r(
            "zeros",
            "zeros",
            &[],
            vec![("size", ints(&[3])), ("dtype", Attr::Dt)],
        ),
        r(
            "ones",
            "ones",
            &[],
            vec![("size", ints(&[2, 2])), ("dtype", Attr::Dt)],
        ),
        r("sym_ints", "sym_ints", &[], vec![("values", ints(&[4, 5]))]),
        // Elementwise.
        r("add", "add", &[A, B], vec![]),
        r("sub", "sub", &[A, B], vec![]),
        r("mul", "mul", &[A, B], vec![]),
        r("div", "div (truncating)", &[A, B], vec![]),
        r("pow", "pow", &[A, E], vec![]),
        r("maximum", "maximum", &[A, B], vec![]),
        r("minimum", "minimum", &[A, B], vec![]),
        r("eq", "eq", &[A, B], vec![]),
        r("ne", "ne", &[A, B], vec![]),
        r("lt", "lt", &[A, B], vec![]),
        r("le", "le", &[A, B], vec![]),
        r("gt", "gt", &[A, B], vec![]),
        r("ge", "ge", &[A, B], vec![]),
        r("neg", "neg", &[A], vec![]),
        r("abs", "abs", &[A], vec![]),
        r("relu", "relu", &[A], vec![]),
        r("where", "where", &[Mask, A, B], vec![]),
        r(
            "masked_fill",
            "masked_fill",
            &[A, Mask],
            vec![("value", float(3.0))],
        ),
        r(
            "cast",
            "cast to f32",
            &[A],
            vec![("dtype", dtype(DType::F32))],
        ),
        r(
            "cast",
            "cast to i32",
            &[A],
            vec![("dtype", dtype(DType::I32))],
        ),
        r(
            "cast",
            "cast to i64",
            &[A],
            vec![("dtype", dtype(DType::I64))],
        ),
        r(
            "cast",
            "cast to bool",
            &[A],
            vec![("dtype", dtype(DType::Bool))],
        ),
        r("cast", "cast from f32", &[F], vec![("dtype", Attr::Dt)]),
        r("contiguous", "contiguous", &[A], vec![]),
        // Contraction.
        r("matmul", "matmul", &[A, Bt], vec![]),
        // Layout.
        r(
            "transpose",
            "transpose",
            &[A],
            vec![("dim0", int(0)), ("dim1", int(2))],
        ),
        r("permute", "permute", &[A], vec![("dims", ints(&[2, 0, 1]))]),
        r("reshape", "reshape", &[A], vec![("shape", ints(&[6, -1]))]),
        r("expand", "expand", &[A1], vec![("size", ints(&[2, 3, 4]))]),
        r("unsqueeze", "unsqueeze", &[A], vec![("dim", int(1))]),
        r("squeeze", "squeeze", &[A1], vec![("dims", ints(&[1]))]),
        r("concat", "concat", &[A, B], vec![("dim", int(1))]),
        r(
            "split",
            "split",
            &[A],
            vec![("split_sizes", ints(&[1, 2])), ("dim", int(1))],
        ),
        r(
            "slice",
            "slice",
            &[A],
            vec![
                ("dim", int(2)),
                ("start", int(1)),
                ("end", int(3)),
                ("step", int(1)),
            ],
        ),
        r("tril", "tril", &[A], vec![("diagonal", int(1))]),
        r("triu", "triu", &[A], vec![("diagonal", int(-1))]),
        // Indexing.
        r(
            "gather",
            "gather, i64 indices",
            &[A, Idx(DType::I64)],
            vec![("dim", int(1))],
        ),
        r(
            "gather",
            "gather, i32 indices",
            &[A, Idx(DType::I32)],
            vec![("dim", int(1))],
        ),
        r(
            "gather_elements",
            "gather_elements",
            &[A, IdxElems],
            vec![("dim", int(2))],
        ),
        r(
            "gather_nd",
            "gather_nd",
            &[A, IdxNd],
            vec![("batch_dims", int(0))],
        ),
        r(
            "index_select",
            "index_select",
            &[A, Idx1],
            vec![("dim", int(1))],
        ),
        r("cumsum", "cumsum", &[A], vec![("dim", int(1))]),
        r("cumsum", "cumsum, last dim", &[A], vec![("dim", int(-1))]),
        // Reductions.
        r(
            "sum",
            "sum of a dim",
            &[A],
            vec![("dims", ints(&[1])), ("keepdim", boolean(false))],
        ),
        r(
            "sum",
            "sum of all",
            &[A],
            vec![("dims", ints(&[])), ("keepdim", boolean(true))],
        ),
        r(
            "mean",
            "mean (truncating)",
            &[A],
            vec![("dims", ints(&[2])), ("keepdim", boolean(false))],
        ),
        r(
            "amax",
            "amax",
            &[A],
            vec![("dims", ints(&[0, 2])), ("keepdim", boolean(true))],
        ),
    ];
    v.extend([
        refused("reciprocal", &[In::A], vec![]),
        refused("sqrt", &[In::A], vec![]),
        refused("rsqrt", &[In::A], vec![]),
        refused("exp", &[In::A], vec![]),
        refused("log", &[In::A], vec![]),
        refused("sin", &[In::A], vec![]),
        refused("cos", &[In::A], vec![]),
        refused("erf", &[In::A], vec![]),
        refused("tanh", &[In::A], vec![]),
        refused("sigmoid", &[In::A], vec![]),
        refused("silu", &[In::A], vec![]),
        refused("gelu", &[In::A], vec![]),
        refused("isnan", &[In::A], vec![]),
        refused("dropout", &[In::A], vec![]),
        refused("not", &[In::A], vec![]),
        refused("and", &[In::A, In::B], vec![]),
        refused("or", &[In::A, In::B], vec![]),
        refused("softmax", &[In::A], vec![("dim", int(1))]),
        refused("log_softmax", &[In::A], vec![("dim", int(1))]),
        refused("layer_norm", &[In::A], vec![]),
        refused("rms_norm", &[In::A], vec![]),
        refused("conv2d", &[In::A, In::A], vec![]),
        refused(
            "scaled_dot_product_attention",
            &[In::A, In::A, In::A],
            vec![],
        ),
        refused(
            "scaled_dot_product_attention_backward",
            &[In::A, In::A, In::A, In::A, In::A],
            vec![],
        ),
        refused("cross_entropy", &[In::A, In::A], vec![]),
        refused("cross_entropy_backward", &[In::A, In::A, In::A], vec![]),
    ]);
    v
}

/// The ops no recipe needs: graph inputs, constants, opaque nodes.
const NOT_OPS: [&str; 3] = ["input", "constant", "opaque"];

fn op(name: &str) -> &'static OpDef {
    BUILTIN
        .iter()
        .copied()
        .find(|o| o.name == name)
        .unwrap_or_else(|| panic!("no built-in op `{name}`"))
}

/// The recipe's graph at `dt` with its inputs, or graphrw's refusal.
fn build(rc: &Recipe, dt: DType) -> Result<(Graph, Vec<Tensor>), String> {
    let mut g = Graph::new();
    let mut operands = Vec::new();
    let mut inputs = Vec::new();
    for (i, x) in rc.ins.iter().enumerate() {
        let t = x.tensor(dt);
        operands.push(g.add_input(format!("x{i}"), TensorMeta::of(&t)));
        inputs.push(t);
    }
    let attrs: Vec<(&str, AttrValue)> = rc
        .attrs
        .iter()
        .map(|(n, a)| {
            let v = match a {
                Attr::V(v) => v.clone(),
                Attr::Dt => AttrValue::DType(dt),
            };
            (*n, v)
        })
        .collect();
    let id = g
        .add_op(op(rc.op), &operands, &attrs)
        .map_err(|e| e.to_string())?;
    let n = g.node(id).expect("node").outputs().len();
    let outs = (0..n as u32).map(|k| Value::new(id, k)).collect();
    g.set_outputs(outs).map_err(|e| e.to_string())?;
    Ok((g, inputs))
}

/// Every built-in op has a recipe, so a new op cannot skip the dtype check.
#[test]
fn every_builtin_op_has_an_integer_recipe() {
    let rs = recipes();
    let missing: Vec<&str> = BUILTIN
        .iter()
        .map(|o| o.name)
        .filter(|n| !NOT_OPS.contains(n) && !rs.iter().any(|r| r.op == *n))
        .collect();
    assert!(missing.is_empty(), "ops without a recipe here: {missing:?}");
}

/// The ops listed as refusing integers are refused when built, with a message naming
/// the op; every other op builds at int32 and int64.
#[test]
fn ops_without_an_integer_form_are_refused_when_built() {
    let mut failures = Vec::new();
    for rc in recipes() {
        for dt in [DType::I32, DType::I64] {
            match (build(&rc, dt), rc.ints) {
                (Ok(_), true) => {}
                (Err(e), false) if e.contains(rc.op) && e.lines().count() == 1 => {}
                (Err(e), false) => failures.push(format!("{} {dt}: unclear refusal: {e}", rc.what)),
                (Ok(_), false) => failures.push(format!(
                    "{} {dt}: built, but listed as refusing integers",
                    rc.what
                )),
                (Err(e), true) => failures.push(format!("{} {dt}: {e}", rc.what)),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Runs the recipe at `dt` on graphrw: the reference stack (each output of its
/// metadata's dtype), the default stack and the model saved and loaded back, all alike;
/// the saved model with its inputs, and the reference outputs.
fn run_graphrw(rc: &Recipe, dt: DType) -> Result<(ort_support::Case, Vec<Tensor>), String> {
    let (g, inputs) = build(rc, dt)?;
    let want = run_reference(&g, &inputs).map_err(|e| format!("reference: {e}"))?;
    for (k, (t, &v)) in want.iter().zip(g.outputs()).enumerate() {
        let m = g.meta(v).map_err(|e| e.to_string())?;
        if t.dtype() != m.dtype {
            return Err(format!(
                "output {k} is {} where the graph says {m}",
                t.dtype()
            ));
        }
    }
    let p = plan(&g, &default_stack()).map_err(|e| format!("plan: {e}"))?;
    let (fast, _) = p.run(&inputs).map_err(|e| format!("default stack: {e}"))?;
    ort_support::same_all(&fast, &want).map_err(|e| format!("default stack: {e}"))?;
    let bytes = to_bytes(&g).map_err(|e| format!("save: {e}"))?;
    let back = load_bytes(&bytes).map_err(|e| format!("load: {e}"))?;
    let again = run_reference(&back, &inputs).map_err(|e| format!("loaded back: {e}"))?;
    ort_support::same_all(&again, &want).map_err(|e| format!("loaded back: {e}"))?;
    let case = ort_support::Case {
        name: format!("{} {dt}", rc.what),
        model: bytes,
        inputs,
    };
    Ok((case, want))
}

/// Every op on int32 and int64 gives its metadata's dtype on both stacks, the same
/// values loaded back from ONNX, and onnxruntime's dtypes and values.
#[test]
fn every_integer_op_gives_the_dtype_of_its_metadata_and_onnxruntime() {
    let ort = ort_support::python_or_skip("integer ops are not compared with onnxruntime");
    let mut failures = Vec::new();
    let mut cases = Vec::new();
    let mut wants = Vec::new();
    for rc in recipes().into_iter().filter(|r| r.ints) {
        for dt in [DType::I32, DType::I64] {
            match run_graphrw(&rc, dt) {
                Ok((case, want)) => {
                    cases.push(case);
                    wants.push(want);
                }
                Err(e) => failures.push(format!("{} {dt}: {e}", rc.what)),
            }
        }
    }
    if let Some(python) = ort {
        let got = ort_support::run_all(&python, &cases);
        for ((c, want), got) in cases.iter().zip(&wants).zip(got) {
            match got.and_then(|g| ort_support::same_all(&g, want)) {
                Ok(()) => println!("{:<28} matches onnxruntime", c.name),
                Err(e) => failures.push(format!("{}: against onnxruntime: {e}", c.name)),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

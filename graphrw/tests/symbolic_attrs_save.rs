//! Attributes known only at run time are saved as shape arithmetic, or refused by name
//! (issue #53: a causal mask offset by a cache's length is `tril(.., diagonal=past)`, and
//! saving it failed with "attribute `diagonal` past has no ONNX form in `Trilu`").
//!
//! The first test finds every attribute of every built-in op that graphrw accepts as
//! symbolic (an `Int`/`Float` attribute given a symbol, an `Ints` one a list holding
//! one): each must either save, and then be one of the forms the second test runs, or be
//! refused on one line naming the node, the attribute and why. The second test runs each
//! form that saves at two shapes: the graph, the model loaded back, and, where
//! onnxruntime is installed (`$GRAPHRW_PYTHON`, else `../.venv`, else `python3`;
//! `SKIPPED` without it, a failure under `CI=true`), onnxruntime, all alike.

mod ort_support;

use graphrw::exec::run_reference;
use graphrw::meta::SymExpr;
use graphrw::onnx::{load_bytes, to_bytes};
use graphrw::ops::{AttrKind, AttrValue, OpDef, BUILTIN};
use graphrw::{DType, Dim, Graph, Shape, Tensor, TensorMeta, Value};

fn sym(n: &str) -> SymExpr {
    SymExpr::sym(n)
}

/// A dim: a number or a symbol.
fn d(x: &str) -> Dim {
    match x.parse::<u64>() {
        Ok(n) => Dim::Known(n),
        Err(_) => Dim::sym(x),
    }
}

fn meta(dt: DType, dims: &[&str]) -> TensorMeta {
    TensorMeta::new(
        dt,
        Shape::from(dims.iter().map(|x| d(x)).collect::<Vec<_>>()),
    )
}

fn op(name: &str) -> &'static OpDef {
    BUILTIN
        .iter()
        .copied()
        .find(|o| o.name == name)
        .unwrap_or_else(|| panic!("no built-in op `{name}`"))
}

/// A node of `op` over graph inputs of `metas` (named `x0`, `x1`, ...) with `attrs`,
/// beside further inputs of `extra` that only give sizes; the graph's outputs are the
/// node's, then the extra inputs passed through.
fn graph(
    op_name: &str,
    metas: &[TensorMeta],
    extra: &[TensorMeta],
    attrs: &[(&str, AttrValue)],
) -> Result<Graph, String> {
    let mut g = Graph::new();
    let all: Vec<Value> = metas
        .iter()
        .chain(extra)
        .enumerate()
        .map(|(i, m)| g.add_input(format!("x{i}"), m.clone()))
        .collect();
    let id = g
        .add_op(op(op_name), &all[..metas.len()], attrs)
        .map_err(|e| e.to_string())?;
    let n = g.node(id).expect("node").outputs().len() as u32;
    let mut outs: Vec<Value> = (0..n).map(|k| Value::new(id, k)).collect();
    outs.extend(&all[metas.len()..]);
    g.set_outputs(outs).map_err(|e| e.to_string())?;
    Ok(g)
}

/// Attributes by name.
type NamedAttrs = Vec<(&'static str, AttrValue)>;

/// Every built-in op over inputs of symbolic dims (`b`, `s`), with attributes that
/// build.
fn probe_recipe(name: &str) -> Option<(Vec<TensorMeta>, NamedAttrs)> {
    let f = |dims: &[&str]| meta(DType::F32, dims);
    let i64s = |dims: &[&str]| meta(DType::I64, dims);
    let x = f(&["b", "s"]);
    let x3 = f(&["b", "s", "4"]);
    let q = f(&["b", "2", "s", "4"]);
    let (ins, attrs): (Vec<TensorMeta>, NamedAttrs) = match name {
        "arange" => (vec![], vec![("end", AttrValue::Float(4.0))]),
        "full" => (
            vec![],
            vec![
                ("size", AttrValue::Ints(vec![2, 3])),
                ("value", AttrValue::Float(1.0)),
            ],
        ),
        "zeros" | "ones" => (vec![], vec![("size", AttrValue::Ints(vec![2, 3]))]),
        "sym_ints" => (vec![], vec![("values", AttrValue::Ints(vec![2, 3]))]),
        "add" | "sub" | "mul" | "div" | "pow" | "maximum" | "minimum" | "eq" | "ne" | "lt"
        | "le" | "gt" | "ge" => (vec![x.clone(), x.clone()], vec![]),
        "and" | "or" => (vec![meta(DType::Bool, &["b", "s"]); 2], vec![]),
        "not" => (vec![meta(DType::Bool, &["b", "s"])], vec![]),
        "neg" | "abs" | "reciprocal" | "sqrt" | "rsqrt" | "exp" | "log" | "sin" | "cos" | "erf"
        | "tanh" | "sigmoid" | "relu" | "gelu" | "silu" | "isnan" | "contiguous" | "dropout" => {
            (vec![x.clone()], vec![])
        }
        "where" => (
            vec![meta(DType::Bool, &["b", "s"]), x.clone(), x.clone()],
            vec![],
        ),
        "cast" => (
            vec![x.clone()],
            vec![("dtype", AttrValue::DType(DType::I64))],
        ),
        "masked_fill" => (
            vec![x.clone(), meta(DType::Bool, &["b", "s"])],
            vec![("value", AttrValue::Float(0.0))],
        ),
        "matmul" => (vec![x3.clone(), f(&["4", "3"])], vec![]),
        "conv2d" => (
            vec![f(&["1", "2", "5", "5"]), f(&["3", "2", "3", "3"])],
            vec![],
        ),
        "transpose" => (
            vec![x3.clone()],
            vec![("dim0", AttrValue::Int(0)), ("dim1", AttrValue::Int(1))],
        ),
        "permute" => (
            vec![x3.clone()],
            vec![("dims", AttrValue::Ints(vec![1, 0, 2]))],
        ),
        "reshape" => (
            vec![f(&["b", "4"])],
            vec![("shape", AttrValue::Ints(vec![-1, 4]))],
        ),
        "expand" => (
            vec![f(&["1", "4"])],
            vec![("size", AttrValue::Ints(vec![2, 4]))],
        ),
        "unsqueeze" => (vec![x.clone()], vec![("dim", AttrValue::Int(0))]),
        "squeeze" => (
            vec![f(&["b", "1", "4"])],
            vec![("dims", AttrValue::Ints(vec![1]))],
        ),
        "concat" => (vec![x.clone(), x.clone()], vec![("dim", AttrValue::Int(1))]),
        "split" => (
            vec![f(&["b", "6"])],
            vec![
                ("split_sizes", AttrValue::Ints(vec![2, 4])),
                ("dim", AttrValue::Int(1)),
            ],
        ),
        "slice" => (
            vec![x.clone()],
            vec![("dim", AttrValue::Int(1)), ("start", AttrValue::Int(1))],
        ),
        "tril" | "triu" => (vec![x.clone()], vec![]),
        "gather" | "index_select" => (
            vec![x3.clone(), i64s(&["2"])],
            vec![("dim", AttrValue::Int(2))],
        ),
        "gather_elements" => (
            vec![x3.clone(), i64s(&["b", "s", "2"])],
            vec![("dim", AttrValue::Int(2))],
        ),
        "gather_nd" => (vec![x3.clone(), i64s(&["2", "2"])], vec![]),
        "cumsum" | "softmax" | "log_softmax" => (vec![x.clone()], vec![("dim", AttrValue::Int(1))]),
        "sum" | "mean" | "amax" => (vec![x3.clone()], vec![("dims", AttrValue::Ints(vec![1]))]),
        "layer_norm" | "rms_norm" => (vec![x3.clone()], vec![]),
        "scaled_dot_product_attention" => (vec![q.clone(), q.clone(), q.clone()], vec![]),
        "scaled_dot_product_attention_backward" => (vec![q.clone(); 5], vec![]),
        "cross_entropy" => (vec![x3.clone(), i64s(&["b", "s"])], vec![]),
        "cross_entropy_backward" => (vec![f(&[]), x3.clone(), i64s(&["b", "s"])], vec![]),
        _ => return None,
    };
    Some((ins, attrs))
}

/// The ops no recipe needs: graph inputs, constants, opaque nodes.
const NOT_OPS: [&str; 3] = ["input", "constant", "opaque"];

/// The symbolic values tried for an attribute of `kind` whose value is `base`: `p` for
/// an int or float; for an int list, the list `[p]` and `base` with its first or last
/// entry `p`.
fn probes(kind: AttrKind, base: Option<&AttrValue>) -> Vec<AttrValue> {
    let p = sym("p");
    match kind {
        AttrKind::Int | AttrKind::Float => vec![AttrValue::Sym(p)],
        AttrKind::Ints => {
            let mut out = vec![AttrValue::Dims(vec![p.clone()])];
            if let Some(AttrValue::Ints(v)) = base {
                for at in [0, v.len().saturating_sub(1)] {
                    if at < v.len() {
                        let mut e: Vec<SymExpr> = v.iter().map(|&n| SymExpr::int(n)).collect();
                        e[at] = p.clone();
                        out.push(AttrValue::Dims(e));
                    }
                }
            }
            out
        }
        _ => vec![],
    }
}

/// The `(op, attribute)` pairs whose symbolic values save: each is run at two shapes by
/// [`symbolic_attributes_run_in_onnxruntime_at_two_shapes`].
const SAVED: &[(&str, &str)] = &[
    ("arange", "start"),
    ("arange", "end"),
    ("full", "size"),
    ("full", "value"),
    ("zeros", "size"),
    ("ones", "size"),
    ("sym_ints", "values"),
    ("masked_fill", "value"),
    ("dropout", "p"),
    ("reshape", "shape"),
    ("expand", "size"),
    ("slice", "start"),
    ("slice", "end"),
    ("tril", "diagonal"),
    ("triu", "diagonal"),
];

/// The `(op, attribute)` pairs graphrw takes as symbolic but cannot save: their ONNX
/// form takes the value as an attribute, a constant.
const REFUSED: &[(&str, &str)] = &[
    ("layer_norm", "eps"),
    ("rms_norm", "eps"),
    ("scaled_dot_product_attention", "dropout_p"),
];

#[test]
fn every_symbolic_attribute_saves_or_is_refused_by_name() {
    let mut failures = Vec::new();
    let mut saved = Vec::new();
    let mut refused = Vec::new();
    for def in BUILTIN.iter().filter(|o| !NOT_OPS.contains(&o.name)) {
        let Some((ins, base)) = probe_recipe(def.name) else {
            failures.push(format!("`{}` has no probe recipe here", def.name));
            continue;
        };
        // The probes' symbol `p` is the size of an input of its own.
        let extra = [meta(DType::F32, &["p"])];
        if let Err(e) = graph(def.name, &ins, &[], &base) {
            failures.push(format!("`{}`'s recipe does not build: {e}", def.name));
            continue;
        }
        for spec in def.attrs {
            let given = base.iter().find(|(n, _)| *n == spec.name).map(|(_, v)| v);
            for value in probes(spec.kind, given) {
                let mut attrs: Vec<(&str, AttrValue)> = base
                    .iter()
                    .filter(|(n, _)| *n != spec.name)
                    .cloned()
                    .collect();
                attrs.push((spec.name, value.clone()));
                // graphrw refuses this symbolic value where it is built.
                let Ok(g) = graph(def.name, &ins, &extra, &attrs) else {
                    continue;
                };
                let pair = (def.name, spec.name);
                match to_bytes(&g) {
                    Ok(_) => saved.push(pair),
                    Err(e) => {
                        let e = e.to_string();
                        let clear = e.lines().count() == 1
                            && e.contains(def.name)
                            && e.contains(&format!("`{}`", spec.name))
                            && e.contains("known only at run time");
                        if !clear {
                            failures.push(format!(
                                "{}.{} = {value}: unclear refusal: {e}",
                                def.name, spec.name
                            ));
                        }
                        println!("refused: {e}");
                        refused.push(pair);
                    }
                }
                break;
            }
        }
    }
    saved.sort_unstable();
    saved.dedup();
    for pair in &saved {
        if !SAVED.contains(pair) {
            failures.push(format!(
                "{}.{} saves but is not run in onnxruntime here",
                pair.0, pair.1
            ));
        }
    }
    for pair in SAVED {
        if !saved.contains(pair) {
            failures.push(format!(
                "{}.{} is listed as saved but did not save",
                pair.0, pair.1
            ));
        }
    }
    refused.sort_unstable();
    refused.dedup();
    if refused != REFUSED {
        failures.push(format!(
            "refused {refused:?}, where {REFUSED:?} are expected"
        ));
    }
    println!("saved: {saved:?}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A form to run: a graph over symbolic inputs, and its inputs at two shapes.
struct Form {
    name: &'static str,
    graph: Graph,
    inputs: [Vec<Tensor>; 2],
}

/// Deterministic values of `dt` and `shape`, small integers for the integer dtypes.
fn values(dt: DType, shape: &[usize], seed: usize) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|i| match dt {
            DType::Bool => (i * 7 + seed).is_multiple_of(3) as u8 as f64,
            d if d.is_float() => (((i * 37 + seed * 11) % 101) as f64) / 50.0 - 1.0,
            _ => ((i * 5 + seed) % 11) as f64 - 5.0,
        })
        .collect();
    Tensor::from_f64_slice(dt, shape, &v).expect("tensor")
}

/// Inputs of `metas` at the sizes of `env` (each symbol's value).
fn at(metas: &[TensorMeta], env: &[(&str, u64)]) -> Vec<Tensor> {
    metas
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let shape: Vec<usize> = m
                .shape
                .dims()
                .iter()
                .map(|d| {
                    let e = d.to_expr();
                    let look = |s: &str| env.iter().find(|(n, _)| *n == s).map(|(_, v)| *v as i64);
                    e.eval(&look).expect("bound") as usize
                })
                .collect();
            values(m.dtype, &shape, i)
        })
        .collect()
}

/// The forms of [`SAVED`]: each over inputs of dims `b`, `s`, `t` (and `p`, `z`), run
/// at two bindings.
fn forms() -> Vec<Form> {
    let f = |dims: &[&str]| meta(DType::F32, dims);
    let envs: [&[(&str, u64)]; 2] = [
        &[("b", 2), ("s", 3), ("t", 5), ("p", 2), ("z", 0)],
        &[("b", 1), ("s", 4), ("t", 7), ("p", 3), ("z", 1)],
    ];
    let t_minus_s = sym("t").sub(&sym("s")).expect("t - s");
    let mut out = Vec::new();
    let mut add = |name,
                   ins: Vec<TensorMeta>,
                   extra: Vec<TensorMeta>,
                   op_name: &str,
                   attrs: Vec<(&str, AttrValue)>| {
        let graph = graph(op_name, &ins, &extra, &attrs).unwrap_or_else(|e| panic!("{name}: {e}"));
        let all: Vec<TensorMeta> = ins.into_iter().chain(extra).collect();
        out.push(Form {
            name,
            graph,
            inputs: [at(&all, envs[0]), at(&all, envs[1])],
        });
    };
    let bs = || vec![sym("b"), sym("s")];
    let bool_bs = meta(DType::Bool, &["b", "s"]);
    let t_minus_s_plus_1 = t_minus_s.add(&SymExpr::int(1)).expect("+1");
    let p_plus_s = sym("p").add(&sym("s")).expect("p + s");
    let b_times_s = sym("b").mul(&sym("s")).expect("b s");
    // The form: the mask of queries [s] over a cache and themselves [t].
    add(
        "tril k = t - s",
        vec![f(&["s", "t"])],
        vec![],
        "tril",
        vec![("diagonal", AttrValue::Sym(t_minus_s.clone()))],
    );
    add(
        "triu k = t - s + 1",
        vec![f(&["b", "s", "t"])],
        vec![],
        "triu",
        vec![("diagonal", AttrValue::Sym(t_minus_s_plus_1))],
    );
    // Floor division of an operand that is negative at run time: ONNX's `Div` on
    // integers truncates, so the writer must floor (`(3 - 5) // 2` is -1 either way,
    // `(4 - 7) // 2` is -2 where truncation gives -1).
    let s_minus_t_half = sym("s")
        .sub(&sym("t"))
        .and_then(|e| e.div_floor(&SymExpr::int(2)))
        .expect("(s - t) // 2");
    add(
        "tril k = (s - t) // 2",
        vec![f(&["s", "t"])],
        vec![],
        "tril",
        vec![("diagonal", AttrValue::Sym(s_minus_t_half))],
    );
    add(
        "masked_fill f32 value s",
        vec![f(&["b", "s"]), bool_bs.clone()],
        vec![],
        "masked_fill",
        vec![("value", AttrValue::Sym(sym("s")))],
    );
    add(
        "masked_fill i64 value s",
        vec![meta(DType::I64, &["b", "s"]), bool_bs],
        vec![],
        "masked_fill",
        vec![("value", AttrValue::Sym(sym("s")))],
    );
    let full = |size, value, dt| {
        vec![
            ("size", AttrValue::Dims(size)),
            ("value", AttrValue::Sym(value)),
            ("dtype", AttrValue::DType(dt)),
        ]
    };
    // A size that is the broadcast of two (`b` against `s - p`: 2 against 1, then 1
    // against 1).
    let bcast = SymExpr::broadcast(&[sym("b"), sym("s").sub(&sym("p")).expect("s - p")])
        .expect("broadcast");
    add(
        "full f32 [broadcast(b, s - p), s] of s",
        vec![],
        vec![f(&["b", "s", "p"])],
        "full",
        full(vec![bcast, sym("s")], sym("s"), DType::F32),
    );
    add(
        "full f32 [b, s] of s",
        vec![],
        vec![f(&["b", "s"])],
        "full",
        full(bs(), sym("s"), DType::F32),
    );
    add(
        "full i32 [b, 3] of t - s",
        vec![],
        vec![f(&["b", "s", "t"])],
        "full",
        full(
            vec![sym("b"), SymExpr::int(3)],
            t_minus_s.clone(),
            DType::I32,
        ),
    );
    add(
        "zeros [b, s]",
        vec![],
        vec![f(&["b", "s"])],
        "zeros",
        vec![("size", AttrValue::Dims(bs()))],
    );
    add(
        "ones i64 [s, b]",
        vec![],
        vec![f(&["b", "s"])],
        "ones",
        vec![
            ("size", AttrValue::Dims(vec![sym("s"), sym("b")])),
            ("dtype", AttrValue::DType(DType::I64)),
        ],
    );
    add(
        "sym_ints [b, s * 2]",
        vec![],
        vec![f(&["b", "s"])],
        "sym_ints",
        vec![(
            "values",
            AttrValue::Dims(vec![sym("b"), sym("s").scale(2).expect("2s")]),
        )],
    );
    // A probability: `z` is 0 in one run, 1 in the other.
    add(
        "dropout p = z",
        vec![f(&["b", "s"])],
        vec![f(&["z"])],
        "dropout",
        vec![("p", AttrValue::Sym(sym("z")))],
    );
    add(
        "arange p .. p + s",
        vec![],
        vec![f(&["b", "s"]), f(&["b", "p"])],
        "arange",
        vec![
            ("start", AttrValue::Sym(sym("p"))),
            ("end", AttrValue::Sym(p_plus_s)),
            ("dtype", AttrValue::DType(DType::I64)),
        ],
    );
    // A floor division of a dividend that may be negative ((s - 6) // 4 is -1 at
    // s = 3 and 4, where ONNX's truncating `Div` gives 0).
    add(
        "arange (s - 6) // 4 .. s",
        vec![],
        vec![f(&["b", "s"])],
        "arange",
        vec![
            (
                "start",
                AttrValue::Sym(
                    sym("s")
                        .sub(&SymExpr::int(6))
                        .and_then(|e| e.div_floor(&SymExpr::int(4)))
                        .expect("(s - 6) // 4"),
                ),
            ),
            ("end", AttrValue::Sym(sym("s"))),
            ("dtype", AttrValue::DType(DType::I64)),
        ],
    );
    add(
        "reshape [b * s, 4]",
        vec![f(&["b", "s", "4"])],
        vec![],
        "reshape",
        vec![("shape", AttrValue::Dims(vec![b_times_s, SymExpr::int(4)]))],
    );
    add(
        "expand [b, s, 4]",
        vec![f(&["b", "1", "4"])],
        vec![f(&["s"])],
        "expand",
        vec![(
            "size",
            AttrValue::Dims(vec![sym("b"), sym("s"), SymExpr::int(4)]),
        )],
    );
    add(
        "slice t - s .. t",
        vec![f(&["b", "t"])],
        vec![f(&["s"])],
        "slice",
        vec![
            ("dim", AttrValue::Int(1)),
            ("start", AttrValue::Sym(t_minus_s.clone())),
            ("end", AttrValue::Sym(sym("t"))),
        ],
    );
    out
}

#[test]
fn symbolic_attributes_run_in_onnxruntime_at_two_shapes() {
    let ort = ort_support::python_or_skip("saved symbolic attributes are not run in onnxruntime");
    let mut failures = Vec::new();
    let mut cases = Vec::new();
    let mut wants = Vec::new();
    let fs = forms();
    for pair in SAVED {
        let covered = fs.iter().any(|f| {
            f.graph.nodes_with_op(pair.0).any(|id| {
                let n = f.graph.node(id).expect("node");
                n.attrs().get(pair.1).is_some_and(AttrValue::is_symbolic)
            })
        });
        assert!(covered, "no form runs {}.{} symbolic", pair.0, pair.1);
    }
    for form in &fs {
        let result = (|| -> Result<(Vec<u8>, Vec<Vec<Tensor>>), String> {
            let bytes = to_bytes(&form.graph).map_err(|e| format!("save: {e}"))?;
            let back = load_bytes(&bytes).map_err(|e| format!("load: {e}"))?;
            let mut want = Vec::new();
            for (k, inputs) in form.inputs.iter().enumerate() {
                let w = run_reference(&form.graph, inputs).map_err(|e| format!("run {k}: {e}"))?;
                let got = run_reference(&back, inputs)
                    .map_err(|e| format!("loaded back, run {k}: {e}"))?;
                ort_support::same_all(&got, &w)
                    .map_err(|e| format!("loaded back, run {k}: {e}"))?;
                want.push(w);
            }
            Ok((bytes, want))
        })();
        match result {
            Ok((bytes, want)) => {
                for (k, (inputs, w)) in form.inputs.iter().zip(want).enumerate() {
                    cases.push(ort_support::Case {
                        name: format!("{} (shape {k})", form.name),
                        model: bytes.clone(),
                        inputs: inputs.clone(),
                    });
                    wants.push(w);
                }
            }
            Err(e) => failures.push(format!("{}: {e}", form.name)),
        }
    }
    if let Some(python) = ort {
        let got = ort_support::run_all(&python, &cases);
        for ((c, want), got) in cases.iter().zip(&wants).zip(got) {
            match got.and_then(|g| ort_support::same_all(&g, want)) {
                Ok(()) => println!("{:<34} matches onnxruntime", c.name),
                Err(e) => failures.push(format!("{}: {e}", c.name)),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

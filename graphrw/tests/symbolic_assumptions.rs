//! Two symbols for one run-time size (torch's dynamo exporter with `Dim.DYNAMIC` on each
//! input names the key and value cache lengths apart): inference assumes them equal
//! where an op needs it (`matmul`'s inner dims, `concat`, attention; a broadcast
//! assumes nothing, it is a `broadcast(a, b)` dim bound at run time),
//! records the assumption on the graph, and the plan checks it against each run's
//! inputs. Each planted graph plans, gives at a valid binding the results of the same
//! graph written with one symbol, and fails a binding that breaks the assumption with
//! one line naming the input, the dims and the op.

use graphrw::exec::{plan, reference_stack};
use graphrw::{Builder, DType, Dim, Graph, Shape, Tensor, TensorMeta, Var};
use graphrw_kernels::testing::compare::{assert_close_tensors, Tol};

fn ramp(shape: &[usize], seed: usize) -> Tensor {
    let n: usize = shape.iter().product();
    let vals: Vec<f64> = (0..n)
        .map(|i| (((i + seed * 13) * 7919) % 1000) as f64 / 400.0 - 1.25)
        .collect();
    Tensor::from_f64_slice(DType::F32, shape, &vals).unwrap()
}

fn meta(dims: &[Dim]) -> TensorMeta {
    TensorMeta::new(DType::F32, dims.iter().cloned().collect::<Shape>())
}

fn s(name: &str) -> Dim {
    Dim::sym(name)
}

fn k(n: usize) -> Dim {
    Dim::from(n)
}

/// Builds a graph of two inputs `a`, `b` (of `ma`, `mb`) and one output.
fn two_inputs(
    ma: TensorMeta,
    mb: TensorMeta,
    f: impl for<'a> FnOnce(&'a Builder, Var<'a>, Var<'a>) -> Var<'a>,
) -> Graph {
    let g = Builder::new();
    let a = g.input("a", ma);
    let b = g.input("b", mb);
    let out = f(&g, a, b);
    g.output(&[out]).unwrap();
    g.finish()
}

/// Plans `two` (two symbols) and `one` (one symbol), checks `two` has one assumption
/// that its printed form shows, runs both at `good` (equal results) and `two` at `bad`
/// (an error line holding every needle). Returns the error line.
fn check(two: &Graph, one: &Graph, good: &[Tensor], bad: &[Tensor], needles: &[&str]) -> String {
    assert!(one.assumptions().is_empty(), "{one}");
    assert_eq!(two.assumptions().len(), 1, "{two}");
    let printed = two.to_string();
    assert!(printed.contains("  assume "), "{printed}");
    graphrw::verify(two).expect("the graph with the assumption substituted verifies");
    let p2 = plan(two, &reference_stack()).expect("plans with two symbols");
    let p1 = plan(one, &reference_stack()).expect("plans with one symbol");
    let (want, _) = p1.run(good).expect("one symbol runs");
    let (got, _) = p2.run(good).expect("two symbols run at a valid binding");
    assert_close_tensors(&got, &want, Tol::new(0.0, 0.0), "two symbols against one");
    // A second run at the same shapes (the bound views are reused).
    let (again, _) = p2.run(good).expect("runs again");
    assert_close_tensors(&again, &want, Tol::new(0.0, 0.0), "second run");
    let err = p2
        .run(bad)
        .expect_err("a binding that breaks the assumption is refused")
        .to_string();
    assert_eq!(err.lines().count(), 1, "{err}");
    for n in needles {
        assert!(err.contains(n), "`{err}` lacks `{n}`");
    }
    // And the plan still runs a valid binding after the refusal.
    let (got, _) = p2.run(good).expect("runs after a refusal");
    assert_close_tensors(&got, &want, Tol::new(0.0, 0.0), "after a refusal");
    err
}

#[test]
fn matmul_inner_dims_of_two_symbols_are_assumed_equal() {
    let two = two_inputs(meta(&[k(3), s("ka")]), meta(&[s("kb"), k(4)]), |_, a, b| {
        a.matmul(b).unwrap()
    });
    let a = &two.assumptions()[0];
    assert_eq!((&**a.symbol, a.value.to_string()), ("kb", "ka".to_string()));
    let one = two_inputs(meta(&[k(3), s("ka")]), meta(&[s("ka"), k(4)]), |_, a, b| {
        a.matmul(b).unwrap()
    });
    let good = [ramp(&[3, 5], 1), ramp(&[5, 4], 2)];
    let bad = [ramp(&[3, 5], 1), ramp(&[6, 4], 2)];
    let err = check(
        &two,
        &one,
        &good,
        &bad,
        &["input b", "dim 0 is 6", "ka", "kb", "`matmul`"],
    );
    assert!(err.contains("input `a` dim 1 is 5"), "{err}");
}

type Make = for<'a> fn(&'a Builder, Var<'a>, Var<'a>) -> Var<'a>;

fn add<'a>(_: &'a Builder, a: Var<'a>, b: Var<'a>) -> Var<'a> {
    a.add(b).unwrap()
}

fn mul<'a>(_: &'a Builder, a: Var<'a>, b: Var<'a>) -> Var<'a> {
    a.mul(b).unwrap()
}

fn cat<'a>(g: &'a Builder, a: Var<'a>, b: Var<'a>) -> Var<'a> {
    g.var(g.concat_with(&[a.value(), b.value()], 1).unwrap())
}

#[test]
fn add_and_mul_of_two_symbols_broadcast_at_run_time_and_refuse_sizes_that_do_not() {
    for f in [add as Make, mul] {
        // `m` may be 1 against `n` (or `n` against `m`): a broadcast dim, no assumption.
        let two = two_inputs(meta(&[s("n"), k(4)]), meta(&[s("m"), k(4)]), f);
        assert!(two.assumptions().is_empty(), "{two}");
        assert!(two.to_string().contains("[broadcast(m, n), 4]"), "{two}");
        graphrw::verify(&two).expect("verifies");
        let p = plan(&two, &reference_stack()).expect("plans");
        for (rows_a, rows_b) in [(3, 3), (3, 1), (1, 3), (1, 1), (0, 1), (1, 0)] {
            let known = two_inputs(meta(&[k(rows_a), k(4)]), meta(&[k(rows_b), k(4)]), f);
            let inputs = [ramp(&[rows_a, 4], 1), ramp(&[rows_b, 4], 2)];
            let (want, _) = plan(&known, &reference_stack())
                .unwrap()
                .run(&inputs)
                .unwrap();
            let (got, _) = p.run(&inputs).expect("a valid broadcast runs");
            assert_eq!(got[0].shape(), want[0].shape());
            assert_close_tensors(&got, &want, Tol::new(0.0, 0.0), "symbolic against known");
        }
        let err = p
            .run(&[ramp(&[3, 4], 1), ramp(&[2, 4], 2)])
            .expect_err("3 against 2 does not broadcast")
            .to_string();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("broadcast(m, n)") && err.contains("[2, 3]"),
            "{err}"
        );
        p.run(&[ramp(&[1, 4], 1), ramp(&[5, 4], 2)])
            .expect("runs after a refusal");
    }
}

/// An op that needs a broadcast dim equal to one of its sizes (`matmul` after a
/// broadcasting `add`: the values' rows against the broadcast of the scores' and the
/// mask's) requires it, checked at every run, with no symbol eliminated: the mask's
/// `m` may be 1 or the keys' `k`, nothing else.
#[test]
fn a_broadcast_needed_equal_to_a_member_is_required_not_assumed() {
    let g = Builder::new();
    let scores = g.input("scores", meta(&[k(2), s("k")]));
    let mask = g.input("mask", meta(&[k(2), s("m")]));
    let v = g.input("v", meta(&[s("k"), k(3)]));
    let out = scores.add(mask).unwrap().matmul(v).unwrap();
    g.output(&[out]).unwrap();
    let two = g.finish();
    assert!(two.assumptions().is_empty(), "{two}");
    assert_eq!(two.requirements().len(), 1, "{two}");
    let printed = two.to_string();
    assert!(
        printed.contains("require broadcast(k, m) = k  (`matmul`"),
        "{printed}"
    );
    graphrw::verify(&two).expect("verifies");
    let p = plan(&two, &reference_stack()).unwrap();
    for m in [5, 1] {
        let inputs = [ramp(&[2, 5], 1), ramp(&[2, m], 2), ramp(&[5, 3], 3)];
        let known = {
            let g = Builder::new();
            let a = g.input("scores", meta(&[k(2), k(5)]));
            let b = g.input("mask", meta(&[k(2), k(m)]));
            let c = g.input("v", meta(&[k(5), k(3)]));
            let out = a.add(b).unwrap().matmul(c).unwrap();
            g.output(&[out]).unwrap();
            g.finish()
        };
        let (want, _) = plan(&known, &reference_stack())
            .unwrap()
            .run(&inputs)
            .unwrap();
        let (got, _) = p.run(&inputs).expect("m = 1 or k runs");
        assert_close_tensors(&got, &want, Tol::new(0.0, 0.0), "symbolic against known");
    }
    // k = 1 with m = 5 broadcasts in the `add`, but the `matmul` then reads 5 rows
    // of `v`, which has 1: the requirement refuses it in one line.
    let err = p
        .run(&[ramp(&[2, 1], 1), ramp(&[2, 5], 2), ramp(&[1, 3], 3)])
        .expect_err("k = 1 against m = 5")
        .to_string();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("broadcast(k, m) is 5 and k is 1") && err.contains("`matmul`"),
        "{err}"
    );
}

#[test]
fn concat_dims_outside_the_axis_of_two_symbols_are_assumed_equal() {
    let two = two_inputs(meta(&[s("rows_a"), k(2)]), meta(&[s("rows_b"), k(3)]), cat);
    let one = two_inputs(meta(&[s("rows_a"), k(2)]), meta(&[s("rows_a"), k(3)]), cat);
    let good = [ramp(&[4, 2], 1), ramp(&[4, 3], 2)];
    let bad = [ramp(&[4, 2], 1), ramp(&[5, 3], 2)];
    check(
        &two,
        &one,
        &good,
        &bad,
        &["input b", "rows_a", "rows_b", "`concat`"],
    );
}

/// One decode step with a KV cache as the dynamo exporter writes it: the cache lengths
/// of keys and values are two symbols, `past_k` and `past_v`; the new keys and values
/// are appended, then `softmax(q kᵀ / √d) v` by two products (`sdpa` false) or by
/// `scaled_dot_product_attention`.
fn attention_step(past_v: &str, sdpa: bool) -> Graph {
    const H: usize = 2;
    const D: usize = 4;
    let g = Builder::new();
    let bsh = |len: Dim| meta(&[k(1), k(H), len, k(D)]);
    let q = g.input("q", bsh(s("seq")));
    let k_new = g.input("k_new", bsh(s("seq")));
    let v_new = g.input("v_new", bsh(s("seq")));
    let past_key = g.input("past_key", bsh(s("past_k")));
    let past_value = g.input("past_value", bsh(s(past_v)));
    let key = g.var(
        g.concat_with(&[past_key.value(), k_new.value()], 2)
            .unwrap(),
    );
    let value = g.var(
        g.concat_with(&[past_value.value(), v_new.value()], 2)
            .unwrap(),
    );
    let out = if sdpa {
        q.scaled_dot_product_attention(key, value, None).unwrap()
    } else {
        let scores = q.matmul(key.transpose(2, 3).unwrap()).unwrap();
        let probs = scores.mul(0.5).unwrap().softmax(-1).unwrap();
        probs.matmul(value).unwrap()
    };
    g.output(&[out, key, value]).unwrap();
    g.finish()
}

fn step_inputs(seq: usize, past_k: usize, past_v: usize) -> Vec<Tensor> {
    vec![
        ramp(&[1, 2, seq, 4], 1),
        ramp(&[1, 2, seq, 4], 2),
        ramp(&[1, 2, seq, 4], 3),
        ramp(&[1, 2, past_k, 4], 4),
        ramp(&[1, 2, past_v, 4], 5),
    ]
}

#[test]
fn attention_over_two_cache_length_symbols_plans_and_checks_them() {
    for sdpa in [false, true] {
        let two = attention_step("past_v", sdpa);
        let a = &two.assumptions()[0];
        assert_eq!(&**a.symbol, "past_v", "{two}");
        assert_eq!(a.value.to_string(), "past_k");
        let one = attention_step("past_k", sdpa);
        let op = if sdpa {
            "`scaled_dot_product_attention`"
        } else {
            "`matmul`"
        };
        let err = check(
            &two,
            &one,
            &step_inputs(3, 7, 7),
            &step_inputs(3, 7, 6),
            &[
                "input past_value",
                "dim 2 is 6 (past_v)",
                "`past_key` dim 2 is 7",
                op,
            ],
        );
        assert!(err.contains("past_k + seq"), "{err}");
        // A decode step (one new token) over another cache length runs too.
        let p = plan(&two, &reference_stack()).unwrap();
        let (out, _) = p.run(&step_inputs(1, 9, 9)).unwrap();
        assert_eq!(out[0].shape(), &[1, 2, 1, 4]);
    }
}

#[test]
fn provably_different_dims_are_still_an_error() {
    // `seq` against `past + seq` could only hold with `past = 0`: no assumption.
    let g = Builder::new();
    let a = g.input("a", meta(&[k(2), s("seq")]));
    let b = g.input("b", meta(&[s("past"), k(3)]));
    let c = g.input("c", meta(&[s("seq"), k(3)]));
    let bc = g.var(g.concat_with(&[b.value(), c.value()], 0).unwrap());
    let e = a.matmul(bc).expect_err("seq vs past + seq").to_string();
    assert!(e.contains("seq vs past + seq"), "{e}");
    // Two known sizes that differ.
    let x = g.input("x", meta(&[k(2), k(5)]));
    let y = g.input("y", meta(&[k(6), k(3)]));
    let e = x.matmul(y).expect_err("5 vs 6").to_string();
    assert!(e.contains("5 vs 6"), "{e}");
    assert!(g.finish().assumptions().is_empty());
}

/// `tests/models/two_cache_symbols` (made by `tools/models/make_two_cache_symbols.py`):
/// one attention step as ONNX whose key and value caches have the dim_params `past_k`
/// and `past_v`. It loads with one assumption, plans, gives onnxruntime's outputs at
/// both stored test sets, and refuses a value cache of another length.
#[test]
fn an_onnx_step_with_two_cache_dim_params_matches_onnxruntime() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("tests/models/two_cache_symbols");
    let g = graphrw::onnx::load(dir.join("model.onnx")).expect("loads");
    assert_eq!(g.assumptions().len(), 1, "{g}");
    assert!(
        g.to_string()
            .contains("assume past_v = past_k  (`matmul` (node attend)"),
        "{g}"
    );
    let p = plan(&g, &reference_stack()).expect("plans");
    let sets = graphrw::onnx::read_test_sets(&dir).expect("test sets");
    assert_eq!(sets.len(), 2);
    for set in &sets {
        let inputs = set.inputs_for(&g).expect("inputs");
        let (got, _) = p.run(&inputs).expect("runs");
        let want: Vec<Tensor> = set.outputs.iter().map(|(_, t)| t.clone()).collect();
        assert_close_tensors(&got, &want, Tol::new(1e-5, 1e-5), "against onnxruntime");
    }
    let mut inputs = sets[0].inputs_for(&g).expect("inputs");
    let at = g
        .inputs()
        .iter()
        .position(|&id| g.node(id).and_then(|n| n.name()) == Some("past_value"))
        .expect("past_value");
    let past = inputs[at].shape()[2];
    inputs[at] = ramp(&[1, 2, past + 1, 16], 9);
    let err = p.run(&inputs).expect_err("past_v != past_k").to_string();
    assert_eq!(err.lines().count(), 1, "{err}");
    for n in [
        "input past_value",
        "(past_v)",
        "`past_key` dim 2",
        "node attend",
        "past_k + seq",
    ] {
        assert!(err.contains(n), "`{err}` lacks `{n}`");
    }
}

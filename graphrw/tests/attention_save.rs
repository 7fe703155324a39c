//! Whatever the attention rules make, `save` writes (issue #19): a fused
//! `scaled_dot_product_attention` of every form the rules produce (3-D with the heads
//! folded into the batch, 4-D, 5-D grouped queries, grouped kv heads, causal, bool and
//! additive masks of every rank, cross-attention) is saved, loads back with the same
//! outputs on graphrw's reference executor, and, where onnxruntime is installed
//! (`$GRAPHRW_PYTHON`, else `../.venv`, else `python3`), runs in onnxruntime with the
//! same outputs. Under `CI=true` a missing onnxruntime is a failure.
//!
//! The same forms over inputs of symbolic batch and sequence dims run at two shapes
//! (issue #53: a key-padding mask `[B, 1, 1, K]`, broadcast over the query rows, was
//! written as it stood, and onnxruntime's `Attention` refused it).

mod ort_support;

use graphrw::exec::{default_stack, plan, run_reference};
use graphrw::onnx::{load_bytes, to_bytes};
use graphrw::{Builder, DType, Graph, Tensor};
use graphrw_kernels::testing::compare;

/// Deterministic values in [-1, 1).
fn values(shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let data: Vec<f32> = (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect();
    Tensor::from_vec(shape.to_vec(), data).expect("tensor")
}

enum Mask {
    None,
    /// Additive f32 mask of this shape.
    Additive(Vec<usize>),
    /// Bool padding mask of this shape (key 0 always visible).
    Bool(Vec<usize>),
}

struct Case {
    name: &'static str,
    q: Vec<usize>,
    k: Vec<usize>,
    mask: Mask,
    causal: bool,
    gqa: bool,
}

fn build(c: &Case) -> Graph {
    let b = Builder::new();
    let mut v_shape = c.k.clone();
    let last = v_shape.len() - 1;
    v_shape[last] = 6; // a value head dim unlike the query's
    let q = b.constant(values(&c.q, 1));
    let k = b.constant(values(&c.k, 2));
    let v = b.constant(values(&v_shape, 3));
    let mask = match &c.mask {
        Mask::None => None,
        Mask::Additive(s) => Some(b.constant(values(s, 4))),
        Mask::Bool(s) => {
            let n: usize = s.iter().product();
            let last = *s.last().expect("rank >= 1");
            let data: Vec<bool> = (0..n).map(|i| i % last == 0 || (i * 7) % 3 != 0).collect();
            Some(b.constant(Tensor::from_vec(s.clone(), data).expect("mask")))
        }
    };
    let out = q
        .scaled_dot_product_attention_with(k, v, mask, 0.0, c.causal, Some(0.3), c.gqa)
        .unwrap_or_else(|e| panic!("{}: {e}", c.name));
    b.output(&[out]).expect("output");
    b.finish()
}

fn cases() -> Vec<Case> {
    let c = |name, q: &[usize], k: &[usize], mask, causal, gqa| Case {
        name,
        q: q.to_vec(),
        k: k.to_vec(),
        mask,
        causal,
        gqa,
    };
    vec![
        c("3d", &[6, 5, 8], &[6, 5, 8], Mask::None, false, false),
        c(
            "3d_mask3",
            &[6, 5, 8],
            &[6, 5, 8],
            Mask::Additive(vec![6, 1, 5]),
            false,
            false,
        ),
        c(
            "3d_mask2_causal",
            &[6, 5, 8],
            &[6, 5, 8],
            Mask::Additive(vec![5, 5]),
            true,
            false,
        ),
        c(
            "3d_cross_bool",
            &[6, 3, 8],
            &[6, 7, 8],
            Mask::Bool(vec![6, 3, 7]),
            false,
            false,
        ),
        c("4d", &[2, 3, 5, 8], &[2, 3, 5, 8], Mask::None, false, false),
        c(
            "4d_padding",
            &[2, 3, 5, 8],
            &[2, 3, 5, 8],
            Mask::Bool(vec![2, 1, 1, 5]),
            false,
            false,
        ),
        c(
            "4d_gqa_causal",
            &[2, 4, 5, 8],
            &[2, 2, 5, 8],
            Mask::None,
            true,
            true,
        ),
        c(
            "4d_mqa_mask",
            &[2, 4, 5, 8],
            &[2, 1, 5, 8],
            Mask::Additive(vec![2, 1, 5, 5]),
            false,
            true,
        ),
        c(
            "4d_cross",
            &[2, 3, 3, 8],
            &[2, 3, 7, 8],
            Mask::Additive(vec![2, 1, 1, 7]),
            false,
            false,
        ),
        c(
            "5d_grouped",
            &[2, 2, 3, 5, 8],
            &[2, 2, 1, 5, 8],
            Mask::None,
            false,
            true,
        ),
        c(
            "5d_mask5",
            &[2, 2, 3, 5, 8],
            &[2, 2, 3, 5, 8],
            Mask::Additive(vec![2, 1, 1, 1, 5]),
            false,
            false,
        ),
        c(
            "5d_mask2_causal",
            &[2, 2, 3, 5, 8],
            &[2, 2, 1, 5, 8],
            Mask::Bool(vec![5, 5]),
            true,
            true,
        ),
    ]
}

fn close(a: &[f64], b: &[f64]) -> Result<(), String> {
    let scale = a
        .iter()
        .filter(|x| x.is_finite())
        .fold(0.0f64, |m, x| m.max(x.abs()));
    compare::check_close(b, a, compare::Tol::new(1e-4 + 1e-3 * scale, 0.0))
}

#[test]
fn every_fused_attention_form_saves_loads_back_and_runs_in_onnxruntime() {
    let ort = ort_support::python_or_skip("saved attention models are not run in onnxruntime");
    let mut failures = Vec::new();
    let mut ran = Vec::new();
    for c in cases() {
        let g = build(&c);
        let want = run_reference(&g, &[]).expect("reference run")[0].to_f64_vec();
        let result = (|| -> Result<Vec<u8>, String> {
            let bytes = to_bytes(&g).map_err(|e| format!("save: {e}"))?;
            let back = load_bytes(&bytes).map_err(|e| format!("load: {e}"))?;
            let got = run_reference(&back, &[]).map_err(|e| format!("run: {e}"))?[0].to_f64_vec();
            close(&want, &got).map_err(|e| format!("loaded back: {e}"))?;
            Ok(bytes)
        })();
        match result {
            Ok(bytes) => {
                println!("{:<18} saved, loaded back", c.name);
                ran.push((c.name, bytes, want));
            }
            Err(e) => failures.push(format!("{}: {e}", c.name)),
        }
    }
    if let Some(python) = ort {
        let cases: Vec<ort_support::Case> = ran
            .iter()
            .map(|(name, bytes, _)| ort_support::Case {
                name: name.to_string(),
                model: bytes.clone(),
                inputs: vec![],
            })
            .collect();
        let got = ort_support::run_all(&python, &cases);
        for ((name, _, want), got) in ran.iter().zip(got) {
            match got.and_then(|g| close(want, &g[0].to_f64_vec())) {
                Ok(()) => println!("{name:<18} ran in onnxruntime"),
                Err(e) => failures.push(format!("{name}: onnxruntime: {e}")),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn dtype_of_saved_fused_attention_is_kept() {
    // f16 attention saves as f16 (the Attention op is typed by its inputs).
    let b = Builder::new();
    let q = b.constant(values(&[1, 2, 3, 4], 7).cast(DType::F16));
    let out = q.scaled_dot_product_attention(q, q, None).expect("sdpa");
    b.output(&[out]).expect("output");
    let g = b.finish();
    let back = load_bytes(&to_bytes(&g).expect("save")).expect("load");
    let outs = back.outputs().to_vec();
    assert_eq!(back.meta(outs[0]).expect("meta").dtype, DType::F16);
}

/// The failing case: `attention_scale` matched q with 4 heads over k with one
/// head (a broadcasting `matmul`), and its replacement failed. Now the rule's checks see
/// the grouping (the fused node gets `enable_gqa`), and a batch that only broadcasts
/// (q batch 2, k batch 1) is refused by the checks: nothing fails, nothing is skipped.
#[test]
fn broadcast_kv_heads_fuse_with_grouping_and_broadcast_batches_are_refused() {
    use graphrw::{rules, TensorMeta};
    let build = |kb: usize, kh: usize| {
        let b = Builder::new();
        let q = b.input("q", TensorMeta::new(DType::F32, [2usize, 4, 16, 16]));
        let k = b.input("k", TensorMeta::new(DType::F32, [kb, kh, 16, 16]));
        let v = b.input("v", TensorMeta::new(DType::F32, [kb, kh, 16, 16]));
        let s = q
            .matmul(k.transpose(-2, -1).unwrap())
            .unwrap()
            .mul(0.25)
            .unwrap();
        let out = s.softmax(-1).unwrap().matmul(v).unwrap();
        b.output(&[out]).unwrap();
        b.finish()
    };
    let mut g = build(2, 1);
    let done = rules::optimize(&mut g).expect("optimize");
    assert_eq!(done.skipped().count(), 0, "{done}");
    let fused: Vec<_> = g.nodes_with_op("scaled_dot_product_attention").collect();
    assert_eq!(fused.len(), 1, "{g}");
    let node = g.node(fused[0]).expect("node");
    assert!(node.attrs().bool("enable_gqa").expect("attr"), "{g}");

    let mut g = build(1, 4);
    let done = rules::optimize(&mut g).expect("optimize");
    assert_eq!(done.skipped().count(), 0, "{done}");
    assert_eq!(
        g.nodes_with_op("scaled_dot_product_attention").count(),
        0,
        "{g}"
    );
}

/// A form of attention over graph inputs of symbolic dims: `B` (batch), `S` (queries),
/// `T` (keys); numbers are known dims.
struct SymCase {
    name: &'static str,
    q: &'static [&'static str],
    k: &'static [&'static str],
    /// The mask's dims and whether it is bool (else additive).
    mask: Option<(&'static [&'static str], bool)>,
    causal: bool,
    gqa: bool,
}

fn sym_cases() -> Vec<SymCase> {
    let c = |name, q, k, mask, causal, gqa| SymCase {
        name,
        q,
        k,
        mask,
        causal,
        gqa,
    };
    vec![
        c("3d", &["B", "S", "8"], &["B", "S", "8"], None, false, false),
        c(
            "3d_mask3",
            &["B", "S", "8"],
            &["B", "S", "8"],
            Some((&["B", "1", "S"][..], false)),
            false,
            false,
        ),
        c(
            "3d_mask2_causal",
            &["B", "S", "8"],
            &["B", "S", "8"],
            Some((&["S", "S"][..], false)),
            true,
            false,
        ),
        c(
            "3d_cross_bool",
            &["B", "S", "8"],
            &["B", "T", "8"],
            Some((&["B", "S", "T"][..], true)),
            false,
            false,
        ),
        c(
            "3d_padding",
            &["B", "S", "8"],
            &["B", "T", "8"],
            Some((&["B", "1", "T"][..], true)),
            false,
            false,
        ),
        c(
            "4d",
            &["B", "3", "S", "8"],
            &["B", "3", "S", "8"],
            None,
            false,
            false,
        ),
        c(
            "4d_padding",
            &["B", "3", "S", "8"],
            &["B", "3", "S", "8"],
            Some((&["B", "1", "1", "S"][..], true)),
            false,
            false,
        ),
        c(
            "4d_padding_cross",
            &["B", "3", "S", "8"],
            &["B", "3", "T", "8"],
            Some((&["B", "1", "1", "T"][..], false)),
            false,
            false,
        ),
        c(
            "4d_mask_row",
            &["B", "3", "S", "8"],
            &["B", "3", "T", "8"],
            Some((&["1", "T"][..], false)),
            false,
            false,
        ),
        c(
            "4d_mask_keys",
            &["B", "3", "S", "8"],
            &["B", "3", "T", "8"],
            Some((&["T"][..], false)),
            false,
            false,
        ),
        c(
            "4d_mask_full",
            &["B", "3", "S", "8"],
            &["B", "3", "T", "8"],
            Some((&["B", "1", "S", "T"][..], true)),
            false,
            false,
        ),
        c(
            "4d_gqa_causal",
            &["B", "4", "S", "8"],
            &["B", "2", "S", "8"],
            None,
            true,
            true,
        ),
        c(
            "4d_gqa_padding",
            &["B", "4", "S", "8"],
            &["B", "2", "S", "8"],
            Some((&["B", "1", "1", "S"][..], true)),
            false,
            true,
        ),
        c(
            "4d_mqa_mask",
            &["B", "4", "S", "8"],
            &["B", "1", "S", "8"],
            Some((&["B", "1", "S", "S"][..], false)),
            false,
            true,
        ),
        c(
            "5d_grouped",
            &["B", "2", "3", "S", "8"],
            &["B", "2", "1", "S", "8"],
            None,
            false,
            true,
        ),
        c(
            "5d_padding",
            &["B", "2", "3", "S", "8"],
            &["B", "2", "3", "T", "8"],
            Some((&["B", "1", "1", "1", "T"][..], true)),
            false,
            false,
        ),
        c(
            "5d_mask2_causal",
            &["B", "2", "3", "S", "8"],
            &["B", "2", "1", "S", "8"],
            Some((&["S", "S"][..], true)),
            true,
            true,
        ),
    ]
}

/// The two bindings each symbolic form runs at.
const SIZES: [[(&str, usize); 3]; 2] = [
    [("B", 2), ("S", 5), ("T", 7)],
    [("B", 1), ("S", 3), ("T", 4)],
];

fn dims(names: &[&str]) -> Vec<graphrw::Dim> {
    names
        .iter()
        .map(|n| match n.parse::<u64>() {
            Ok(k) => graphrw::Dim::Known(k),
            Err(_) => graphrw::Dim::sym(n),
        })
        .collect()
}

fn sizes(names: &[&str], at: &[(&str, usize)]) -> Vec<usize> {
    names
        .iter()
        .map(|n| match n.parse::<usize>() {
            Ok(k) => k,
            Err(_) => at.iter().find(|(s, _)| s == n).expect("bound").1,
        })
        .collect()
}

/// The value dims of `c`: the key's with a head dim unlike the query's.
fn v_dims(c: &SymCase) -> Vec<&'static str> {
    let mut v = c.k.to_vec();
    let last = v.len() - 1;
    v[last] = "6";
    v
}

/// The graph of `c` (inputs q, k, v and the mask): over symbolic dims, or with every
/// symbol bound as in `fixed`.
fn build_sym(c: &SymCase, fixed: Option<&[(&str, usize)]>) -> Graph {
    use graphrw::{Shape, TensorMeta};
    let b = Builder::new();
    let shape = |names: &[&str]| -> Shape {
        match fixed {
            None => Shape::from(dims(names)),
            Some(at) => Shape::from(
                sizes(names, at)
                    .into_iter()
                    .map(|n| graphrw::Dim::Known(n as u64))
                    .collect::<Vec<_>>(),
            ),
        }
    };
    let input =
        |name: &str, dt: DType, names: &[&str]| b.input(name, TensorMeta::new(dt, shape(names)));
    let q = input("q", DType::F32, c.q);
    let k = input("k", DType::F32, c.k);
    let v = input("v", DType::F32, &v_dims(c));
    let mask = c
        .mask
        .map(|(m, is_bool)| input("mask", if is_bool { DType::Bool } else { DType::F32 }, m));
    let out = q
        .scaled_dot_product_attention_with(k, v, mask, 0.0, c.causal, Some(0.3), c.gqa)
        .unwrap_or_else(|e| panic!("{}: {e}", c.name));
    b.output(&[out]).expect("output");
    b.finish()
}

/// The inputs of `c` at the sizes of `at`.
fn sym_inputs(c: &SymCase, at: &[(&str, usize)]) -> Vec<Tensor> {
    let mut ins = vec![
        values(&sizes(c.q, at), 1),
        values(&sizes(c.k, at), 2),
        values(&sizes(&v_dims(c), at), 3),
    ];
    if let Some((m, is_bool)) = c.mask {
        let s = sizes(m, at);
        ins.push(if is_bool {
            // Key 0 always visible, so that no query row is fully masked.
            let n: usize = s.iter().product();
            let last = *s.last().expect("rank >= 1");
            let data: Vec<bool> = (0..n).map(|i| i % last == 0 || (i * 7) % 3 != 0).collect();
            Tensor::from_vec(s, data).expect("mask")
        } else {
            values(&s, 4)
        });
    }
    ins
}

/// Every form over symbolic batch and sequence dims saves, loads back and runs in
/// onnxruntime at two shapes, as graphrw's reference executor computes it on the same
/// form at those shapes (and graphrw's default stack on the symbolic graph and on the
/// graph loaded back).
#[test]
fn every_fused_attention_form_runs_in_onnxruntime_at_two_symbolic_shapes() {
    let ort =
        ort_support::python_or_skip("saved symbolic attention models are not run in onnxruntime");
    let mut failures = Vec::new();
    let (mut cases, mut wants) = (Vec::new(), Vec::new());
    for c in sym_cases() {
        let g = build_sym(&c, None);
        let result = (|| -> Result<(Vec<u8>, Vec<Vec<f64>>), String> {
            let bytes = to_bytes(&g).map_err(|e| format!("save: {e}"))?;
            let back = load_bytes(&bytes).map_err(|e| format!("load: {e}"))?;
            let mut want = Vec::new();
            for (i, at) in SIZES.iter().enumerate() {
                let ins = sym_inputs(&c, at);
                let w = run_reference(&build_sym(&c, Some(at)), &ins)
                    .map_err(|e| format!("reference, run {i}: {e}"))?[0]
                    .to_f64_vec();
                for (what, graph) in [("symbolic graph", &g), ("loaded back", &back)] {
                    let p =
                        plan(graph, &default_stack()).map_err(|e| format!("{what}: plan: {e}"))?;
                    let (got, _) = p.run(&ins).map_err(|e| format!("{what}, run {i}: {e}"))?;
                    close(&w, &got[0].to_f64_vec()).map_err(|e| format!("{what}, run {i}: {e}"))?;
                }
                want.push(w);
            }
            Ok((bytes, want))
        })();
        match result {
            Ok((bytes, want)) => {
                for (i, (at, w)) in SIZES.iter().zip(want).enumerate() {
                    wants.push(w);
                    cases.push(ort_support::Case {
                        name: format!("{} (shape {i})", c.name),
                        model: bytes.clone(),
                        inputs: sym_inputs(&c, at),
                    });
                }
            }
            Err(e) => failures.push(format!("{}: {e}", c.name)),
        }
    }
    if let Some(python) = ort {
        let got = ort_support::run_all(&python, &cases);
        for ((c, want), got) in cases.iter().zip(&wants).zip(got) {
            match got.and_then(|g| close(want, &g[0].to_f64_vec())) {
                Ok(()) => println!("{:<28} ran in onnxruntime", c.name),
                Err(e) => failures.push(format!("{}: {e}", c.name)),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

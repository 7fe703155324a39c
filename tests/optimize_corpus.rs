//! `rules::optimize`, the default pipeline, on every corpus model: every attention site
//! (the manifest's count) fused, fewer nodes after than before (and the report's counts
//! are the graph's), the fused ops taken by the fused executors, and the outputs within
//! onnxruntime's `output_0.pb` (1e-4 + 1e-3 * |y|) on the reference executor (fused ops
//! decomposed) and on the default stack (fused kernels).

use std::path::{Path, PathBuf};

use graphrw::exec::GENERATED_CPU;
use graphrw::exec::{default_stack, plan, reference_stack, EPILOGUE_CPU, FUSED_CPU};
use graphrw::{onnx, rules, verify, Tensor};
use graphrw_kernels::testing::compare::{check_close_tensor, Tol};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus")
}

/// (model, attention sites) from the manifest.
fn manifest() -> Vec<(String, usize)> {
    let text = std::fs::read_to_string(corpus().join("manifest.json")).expect("manifest.json");
    let mut out = Vec::new();
    let mut model = None;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("\"model\": \"") {
            model = Some(rest.trim_end_matches(['"', ',']).to_string());
        }
        if let Some(rest) = line.strip_prefix("\"attention_sites\": ") {
            let n = rest.trim_end_matches(',').parse().expect("a count");
            out.push((model.take().expect("model before attention_sites"), n));
        }
    }
    out
}

fn inputs(dir: &Path) -> Vec<Tensor> {
    (0..)
        .map(|i| dir.join(format!("test_data_set_0/input_{i}.pb")))
        .take_while(|p| p.exists())
        .map(|p| onnx::read_tensor_pb(&p).expect("input").1)
        .collect()
}

#[test]
fn the_default_pipeline_on_every_corpus_model() {
    let models = manifest();
    assert_eq!(models.len(), 8, "the manifest lists 8 models: {models:?}");
    let mut failures = Vec::new();
    for (model, sites) in models {
        let dir = corpus().join(&model);
        let mut g = onnx::load(dir.join("model.onnx")).expect("load");
        let loaded = g.node_count();
        let done = rules::optimize(&mut g).unwrap_or_else(|e| panic!("{model}: {e}"));
        verify(&g).unwrap_or_else(|e| panic!("{model}: {e}"));
        assert_eq!(done.nodes_before, loaded, "{model}: nodes before");
        assert_eq!(done.nodes_after, g.node_count(), "{model}: nodes after");
        assert!(
            done.nodes_after < done.nodes_before,
            "{model}: {} -> {} nodes",
            done.nodes_before,
            done.nodes_after
        );
        let attention = g.nodes_with_op("scaled_dot_product_attention").count();
        assert_eq!(attention, sites, "{model}: attention sites fused\n{done}");
        assert_eq!(
            done.fused_nodes.get("scaled_dot_product_attention"),
            Some(&sites),
            "{model}: the report's count"
        );
        assert_eq!(
            g.nodes_with_op("softmax").count(),
            0,
            "{model}: softmax left"
        );
        let kernels: usize = done
            .fused_nodes
            .iter()
            .filter(|(op, _)| op.starts_with("fused."))
            .map(|(_, n)| n)
            .sum();
        assert!(kernels > 0, "{model}: no generated kernel fired\n{done}");
        println!(
            "{model}: {} -> {} nodes, {:?}",
            done.nodes_before, done.nodes_after, done.fused_nodes
        );

        let x = inputs(&dir);
        let (_, want) =
            onnx::read_tensor_pb(dir.join("test_data_set_0/output_0.pb")).expect("output");
        let reference = plan(&g, &reference_stack()).expect("reference plan");
        let fused = plan(&g, &default_stack()).expect("fused plan");
        // The fused ops run on the fused kernels, not decomposed.
        let by = |exec: &str| fused.assignments().filter(|(_, e)| *e == exec).count();
        assert_eq!(
            by(FUSED_CPU),
            sites,
            "{model}: attention on the fused kernel\n{fused}"
        );
        // Every generated-kernel node left in the plan runs on the generated kernels; the
        // others (a `bias_gelu` after a matmul) were folded into a matmul-epilogue node at
        // plan time, so none is run decomposed.
        let left = fused
            .graph()
            .node_ids()
            .filter(|&id| {
                fused.graph().node(id).is_some_and(|n| {
                    graphrw::generated::builtin::ALL
                        .iter()
                        .any(|k| k.op.name == n.op_name())
                })
            })
            .count();
        assert_eq!(
            by(GENERATED_CPU),
            left,
            "{model}: generated kernels\n{fused}"
        );
        assert!(
            left <= kernels && left + by(EPILOGUE_CPU) >= kernels,
            "{model}: {kernels} generated kernels, {left} planned as such\n{fused}"
        );
        for (what, p) in [("reference", reference), ("fused", fused)] {
            let got = p
                .run(&x)
                .unwrap_or_else(|e| panic!("{model} ({what}): {e}"))
                .0;
            if let Err(e) = check_close_tensor(&got[0], &want, Tol::new(1e-4, 1e-3)) {
                failures.push(format!("{model} ({what}): {e}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

//! Attention fusion on the real corpus: every attention site (the manifest's count)
//! becomes one `scaled_dot_product_attention`, and the fused model still matches
//! onnxruntime's reference output — also after causal masks became `is_causal`
//! (`rules::causal::mark_causal`), whose per-model counts the test asserts.

use std::path::{Path, PathBuf};

use graphrw::exec::{default_stack, plan, run_reference, FUSED_CPU};
use graphrw::{onnx, rules, verify, Tensor};
use graphrw_kernels::testing::compare::{check_close_tensor, Tol};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus")
}

/// (model, attention sites) from the manifest.
fn manifest() -> Vec<(String, usize)> {
    let text = std::fs::read_to_string(corpus().join("manifest.json")).expect("manifest.json");
    // A tiny reader for the two fields we need, to keep the test free of a JSON crate.
    let mut out = Vec::new();
    let mut model = None;
    for line in text.lines() {
        let line = line.trim();
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
    let mut v = Vec::new();
    for i in 0.. {
        let p = dir.join(format!("test_data_set_0/input_{i}.pb"));
        if !p.exists() {
            break;
        }
        v.push(onnx::read_tensor_pb(&p).expect("input").1);
    }
    v
}

/// `a` against the reference `b` within `1e-4 + 1e-3 |b|`: the mismatch, if any.
fn mismatch(a: &Tensor, b: &Tensor) -> Option<String> {
    check_close_tensor(a, b, Tol::new(1e-4, 1e-3)).err()
}

#[test]
fn every_attention_site_of_the_corpus_is_fused_and_outputs_match() {
    let models = manifest();
    assert_eq!(models.len(), 8, "the manifest lists 8 models: {models:?}");
    assert_eq!(
        models.iter().map(|(_, n)| n).sum::<usize>(),
        24,
        "24 attention sites in all"
    );
    let mut failures = Vec::new();
    let mut causal = Vec::new();
    for (model, sites) in models {
        let dir = corpus().join(&model);
        let mut g = onnx::load(dir.join("model.onnx")).expect("load");
        let softmax_before = g.nodes_with_op("softmax").count();
        assert_eq!(
            softmax_before, sites,
            "{model}: manifest sites vs softmax nodes"
        );
        let reports = rules::fuse_attention(&mut g).unwrap_or_else(|e| panic!("{model}: {e}"));
        verify(&g).unwrap();
        let fused = g.nodes_with_op("scaled_dot_product_attention").count();
        let left = g.nodes_with_op("softmax").count();
        if fused != sites || left != 0 {
            failures.push(format!(
                "{model}: {fused}/{sites} fused, {left} softmax left\n{}",
                reports.iter().map(|r| r.to_string()).collect::<String>()
            ));
            continue;
        }
        let report = rules::causal::mark_causal(&mut g).unwrap_or_else(|e| panic!("{model}: {e}"));
        verify(&g).unwrap();
        let flagged = g
            .nodes_with_op("scaled_dot_product_attention")
            .filter(|&id| g.node(id).unwrap().attrs().bool("is_causal").unwrap())
            .count();
        assert_eq!(flagged, report.converted, "{model}: causal flags vs report");
        // What mark_causal converts today: bart's two decoder self-attention masks (a
        // bare triangle). GPT-2's, Llama's and T5's triangles are combined with the
        // padding mask in forms it leaves alone. Update with the rules.
        let expected_causal = match model.as_str() {
            "bart_sdpa" => 2,
            _ => 0,
        };
        if report.converted != expected_causal {
            failures.push(format!(
                "{model}: {} masks became is_causal, expected {expected_causal}",
                report.converted
            ));
        }
        causal.push(format!(
            "{model}: {}/{sites} sites causal ({} keep a padding mask, {} masks unchanged)",
            report.converted, report.with_remainder, report.unchanged
        ));
        let expected = onnx::read_tensor_pb(dir.join("test_data_set_0/output_0.pb"))
            .unwrap()
            .1;
        let got = run_reference(&g, &inputs(&dir)).unwrap_or_else(|e| panic!("{model}: {e}"));
        if let Some(e) = mismatch(&got[0], &expected) {
            failures.push(format!("{model}: {e} after fusion (decomposed attention)"));
        }
        // The same graph with the fused CPU kernel claiming every attention node.
        let p = plan(&g, &default_stack()).unwrap();
        let claimed = p.assignments().filter(|(_, e)| *e == FUSED_CPU).count();
        assert_eq!(claimed, sites, "{model}: fused kernel runs every site\n{p}");
        let got = p.run(&inputs(&dir)).unwrap().0;
        if let Some(e) = mismatch(&got[0], &expected) {
            failures.push(format!("{model}: {e} after fusion (fused kernel)"));
        }
    }
    println!("{}", causal.join("\n"));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

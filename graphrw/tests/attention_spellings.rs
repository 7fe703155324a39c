//! Attention in every spelling (issue #19, section 2): small torch modules written the
//! way model code writes attention, exported with `torch.onnx.export(dynamo=True,
//! opset_version=18)` by `tests/models/attention/gen.py` (committed with their
//! inputs). Each model must fuse into the number of `scaled_dot_product_attention`
//! nodes its manifest gives, with no `softmax` left, and onnxruntime must run the
//! optimised model within `1e-4 + 1e-3 * max|y|` of the original.
//!
//! onnxruntime runs through `$GRAPHRW_PYTHON` (default `python3`). Without it the
//! onnxruntime comparison is skipped with a `SKIPPED` line; under `CI=true` that is a
//! failure.

use std::path::{Path, PathBuf};
use std::process::Command;

use graphrw::rules;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models/attention")
}

struct Entry {
    name: String,
    class: String,
    fused: usize,
}

fn manifest() -> Vec<Entry> {
    let text = std::fs::read_to_string(dir().join("manifest.txt")).expect("manifest.txt");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 3, "bad manifest line {l:?}");
            Entry {
                name: f[0].to_string(),
                class: f[1].to_string(),
                fused: f[2].parse().expect("fused count"),
            }
        })
        .collect()
}

fn python() -> String {
    std::env::var("GRAPHRW_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// True when python has onnxruntime and numpy; false (after a visible `SKIPPED` line)
/// when not, and a panic under `CI=true`.
fn have_onnxruntime() -> bool {
    let ok = Command::new(python())
        .args(["-c", "import onnxruntime, numpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but `{} -c 'import onnxruntime, numpy'` fails",
            python()
        );
        println!(
            "SKIPPED: {} has no onnxruntime and numpy: the onnxruntime comparison does not run",
            python()
        );
    }
    ok
}

fn out_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("graphrw-attention-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// Optimises one model, checks the fusion, saves it; returns the saved path.
fn optimise(e: &Entry, out: &Path) -> Result<PathBuf, String> {
    let src = dir().join(format!("{}.onnx", e.name));
    let mut g = graphrw::onnx::load(&src).map_err(|x| format!("load: {x}"))?;
    let done = rules::optimize(&mut g).map_err(|x| format!("optimize: {x}"))?;
    for r in &done.attention {
        if !r.skipped.is_empty() {
            return Err(format!("skipped replacements: {r}"));
        }
    }
    let fused = g.nodes_with_op("scaled_dot_product_attention").count();
    let softmax = g.nodes_with_op("softmax").count();
    if fused != e.fused || softmax != 0 {
        return Err(format!(
            "{fused} fused attention node(s) and {softmax} softmax left, expected {} and 0:\n{g}",
            e.fused
        ));
    }
    let path = out.join(format!("{}.onnx", e.name));
    graphrw::onnx::save(&g, &path).map_err(|x| format!("save: {x}"))?;
    Ok(path)
}

fn compare(e: &Entry, optimised: &Path) -> Result<String, String> {
    let d = dir();
    let mut cmd = Command::new(python());
    cmd.arg(d.join("compare.py"))
        .arg(d.join(format!("{}.onnx", e.name)))
        .arg(optimised)
        .arg(d.join(format!("{}.npz", e.name)));
    if e.class == "nan_row" {
        cmd.arg("--nan-rows-to-zero");
    }
    let o = cmd.output().map_err(|x| format!("python: {x}"))?;
    let text = String::from_utf8_lossy(&o.stdout).trim().to_string();
    if o.status.success() {
        Ok(text)
    } else {
        Err(format!(
            "onnxruntime comparison failed: {text} {}",
            String::from_utf8_lossy(&o.stderr)
        ))
    }
}

#[test]
fn every_spelling_fuses_and_runs_in_onnxruntime_with_the_same_outputs() {
    let entries = manifest();
    let ort = have_onnxruntime();
    let out = out_dir();
    let mut failures = Vec::new();
    let mut per_class: std::collections::BTreeMap<&str, (usize, usize)> = Default::default();
    for e in &entries {
        let c = per_class.entry(&e.class).or_default();
        c.1 += 1;
        let result = optimise(e, &out).and_then(|p| {
            if ort {
                compare(e, &p)
            } else {
                Ok(String::new())
            }
        });
        match result {
            Ok(text) => {
                c.0 += 1;
                println!("{:<28} fused  {}", e.name, text.replace('\n', "; "));
            }
            Err(err) => failures.push(format!("{}: {err}", e.name)),
        }
    }
    for (class, (ok, n)) in &per_class {
        println!("class {class:<10} {ok}/{n} spellings fused and equal");
    }
    let _ = std::fs::remove_dir_all(&out);
    // Every class of issue #19 has at least two spellings.
    for (class, (_, n)) in &per_class {
        assert!(
            *n >= 2 || *class == "nan_row",
            "class {class} has {n} spelling(s)"
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

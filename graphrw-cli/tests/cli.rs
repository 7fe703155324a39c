//! The `graphrw` command end to end: every subcommand on real corpus models, every
//! `optimize --rules` value, and bad arguments, missing files and hostile files (exit
//! code 1 with one `error:` line naming the problem, usage errors exit 2, never a panic).
//!
//! The `run` subcommand is being extended (executor stacks, repeats, comparisons); these
//! tests check what is stable: it runs a corpus model (and an optimised copy) on its test
//! data within tolerance, and refuses what it cannot run in one line.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use graphrw::{onnx, verify};

fn corpus(model: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/corpus")
        .join(model)
}

fn model(name: &str) -> String {
    corpus(name).join("model.onnx").display().to_string()
}

/// A fresh scratch folder for one test, removed when the guard drops (also when the
/// test fails).
fn scratch(test: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("graphrw_cli_{test}_"))
        .tempdir()
        .expect("scratch dir")
}

fn graphrw(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_graphrw"))
        .args(args)
        .output()
        .expect("the graphrw binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn no_panic(args: &[&str], out: &Output) {
    let err = text(&out.stderr);
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "graphrw {args:?} panicked:\n{err}"
    );
}

/// Runs `graphrw args`, asserts success and no panic, returns stdout.
fn ok(args: &[&str]) -> String {
    let out = graphrw(args);
    no_panic(args, &out);
    assert!(
        out.status.success(),
        "graphrw {args:?} failed ({:?}):\n{}",
        out.status.code(),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Runs `graphrw args`, asserts exit code 1 with exactly one short `error:` line on
/// stderr, no panic; returns that line.
fn fails(args: &[&str]) -> String {
    let out = graphrw(args);
    no_panic(args, &out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "graphrw {args:?}: exit code\nstdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let err = text(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        lines.len(),
        1,
        "graphrw {args:?}: one error line, got:\n{err}"
    );
    let line = lines[0];
    assert!(line.starts_with("error: "), "graphrw {args:?}: {line}");
    line.to_string()
}

/// Usage errors are clap's: exit code 2, an `error:` line, no panic.
fn usage_error(args: &[&str]) -> String {
    let out = graphrw(args);
    no_panic(args, &out);
    assert_eq!(out.status.code(), Some(2), "graphrw {args:?}: exit code");
    let err = text(&out.stderr);
    assert!(
        err.starts_with("error: ") || err.contains("Usage: graphrw"),
        "graphrw {args:?}: {err}"
    );
    err
}

/// Every error's first line within 200 characters: `unknown rule`/`unknown rule set`
/// list as many names as fit, and the protobuf decoder's per-level field path is cut
/// to its innermost field.
#[test]
fn error_first_lines_are_at_most_200_chars() {
    let scratch_dir = scratch("long_lines");
    let dir = scratch_dir.path();
    let bad = dir.join("text.onnx");
    std::fs::write(&bad, b"this is not a protobuf at all\n").expect("write");
    let bad = bad.to_str().unwrap().to_string();
    for args in [
        vec!["explain", &model("bert_eager"), "--rule", "nope"],
        vec![
            "optimize",
            &model("bert_eager"),
            "-o",
            "/tmp/x.onnx",
            "--rules",
            "bogus",
        ],
        vec!["inspect", &bad],
    ] {
        let line = fails(&args);
        assert!(
            line.chars().count() <= 200,
            "graphrw {args:?}: error line of {} chars: {line}",
            line.chars().count()
        );
    }
}

#[test]
fn ops_lists_the_vocabulary_and_filters_it() {
    let all = ok(&["ops"]);
    for op in [
        "softmax(",
        "matmul(",
        "scaled_dot_product_attention(",
        "gelu(",
    ] {
        assert!(all.contains(op), "`graphrw ops` lacks {op}");
    }
    let some = ok(&["ops", "softmax"]);
    assert!(
        some.starts_with("softmax(") || some.contains("\nsoftmax("),
        "{some}"
    );
    assert!(
        !some.contains("matmul("),
        "the filter keeps only softmax ops:\n{some}"
    );
    assert!(some.lines().count() < all.lines().count());
    assert_eq!(ok(&["ops", "no_such_op_anywhere"]), "");
}

#[test]
fn inspect_summarises_a_model() {
    let out = ok(&["inspect", &model("bert_eager")]);
    for want in ["inputs:", "input_ids", "attention_mask", "outputs:", "ops:"] {
        assert!(out.contains(want), "inspect lacks {want}:\n{out}");
    }
    // Two attention sites: two softmax nodes.
    let softmax = out
        .lines()
        .find(|l| l.trim_start().starts_with("softmax "))
        .unwrap_or_else(|| panic!("no softmax count:\n{out}"));
    assert_eq!(softmax.split_whitespace().last(), Some("2"), "{softmax}");
}

#[test]
fn print_writes_one_line_per_op() {
    let out = ok(&["print", &model("gpt2_eager")]);
    assert_eq!(out.matches("softmax(").count(), 2, "{out}");
    assert!(out
        .lines()
        .any(|l| l.contains(" = matmul(") && l.contains("# f32[")));
    let graph = onnx::load(model("gpt2_eager")).expect("load");
    let op_lines = out.lines().filter(|l| l.contains(" = ")).count();
    assert!(
        op_lines >= graph.node_count() - graph.inputs().len() - 64,
        "{op_lines}"
    );
}

#[test]
fn dot_writes_graphviz_and_highlights_a_rule() {
    let out = ok(&["dot", &model("llama_sdpa")]);
    assert!(out.starts_with("digraph"), "{}", &out[..out.len().min(200)]);
    assert!(out.trim_end().ends_with('}'));

    let scratch_dir = scratch("dot");
    let dir = scratch_dir.path();
    let file = dir.join("m.dot");
    let o = graphrw(&[
        "dot",
        &model("bert_eager"),
        "-o",
        file.to_str().unwrap(),
        "--highlight",
        "attention",
    ]);
    no_panic(&["dot"], &o);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).is_empty(), "with -o nothing goes to stdout");
    let drawn = std::fs::read_to_string(&file).expect("dot file written");
    assert!(drawn.starts_with("digraph"));
    let plain = ok(&["dot", &model("bert_eager")]);
    assert_ne!(drawn, plain, "highlighting changed nothing");
    assert!(text(&o.stderr).contains("match(es) highlighted"));
    let line = fails(&["dot", &model("bert_eager"), "--highlight", "no_such_rule"]);
    assert!(line.contains("unknown rule `no_such_rule`"), "{line}");
}

#[test]
fn explain_lists_near_misses_and_explains_one_node() {
    let out = ok(&["explain", &model("bert_eager"), "--rule", "attention"]);
    assert!(out.starts_with("rule `attention`:"), "{out}");
    assert!(out.contains("match(es)"), "{out}");
    // At one node: the first softmax as printed.
    let printed = ok(&["print", &model("bert_eager")]);
    let node = printed
        .lines()
        .find(|l| l.contains(" = softmax("))
        .and_then(|l| l.split(" = ").next())
        .expect("a softmax line")
        .trim()
        .to_string();
    let at = ok(&[
        "explain",
        &model("bert_eager"),
        "--rule",
        "attention",
        "--node",
        &node,
    ]);
    assert!(at.contains(&format!("at {node} = softmax(")), "{at}");
    let line = fails(&[
        "explain",
        &model("bert_eager"),
        "--rule",
        "attention",
        "--node",
        "t999999",
    ]);
    assert!(line.contains("t999999"), "{line}");
    let line = fails(&["explain", &model("bert_eager"), "--rule", "nope"]);
    assert!(line.contains("unknown rule `nope`"), "{line}");
}

/// Every `--rules` value: the written model loads, verifies and (for the sets that
/// change this model) has fewer nodes.
#[test]
fn optimize_accepts_every_rule_set_and_writes_a_loadable_model() {
    let scratch_dir = scratch("optimize");
    let dir = scratch_dir.path();
    let src = model("llama_sdpa");
    let before = onnx::load(&src).expect("load").node_count();
    let mut names = vec!["all", "canonical", "attention", "kernels"];
    let kernels: Vec<&str> = graphrw::generated::builtin::ALL
        .iter()
        .filter_map(|k| k.op.name.strip_prefix("fused."))
        .collect();
    names.extend(&kernels);
    for name in names {
        let out = dir.join(format!("{name}.onnx"));
        let stdout = ok(&[
            "optimize",
            &src,
            "-o",
            out.to_str().unwrap(),
            "--rules",
            name,
        ]);
        assert!(stdout.contains("wrote "), "{name}: {stdout}");
        let g = onnx::load(&out).unwrap_or_else(|e| panic!("{name}: written model: {e}"));
        verify(&g).unwrap_or_else(|e| panic!("{name}: written model: {e}"));
        if matches!(name, "all" | "kernels" | "attention") {
            assert!(
                g.node_count() < before,
                "{name}: {before} -> {}",
                g.node_count()
            );
        }
    }
    // Without --rules: the whole pipeline, like `all`; two sets in one pass.
    let out = dir.join("default.onnx");
    let stdout = ok(&["optimize", &src, "-o", out.to_str().unwrap()]);
    let all = onnx::load(dir.join("all.onnx")).expect("all");
    assert_eq!(
        onnx::load(&out).expect("default").node_count(),
        all.node_count()
    );
    assert!(
        stdout.contains(&before.to_string()),
        "node count reported: {stdout}"
    );
    let two = dir.join("two.onnx");
    let stdout = ok(&[
        "optimize",
        &src,
        "-o",
        two.to_str().unwrap(),
        "--rules",
        "canonical",
        "--rules",
        "attention",
    ]);
    assert!(stdout.contains(&format!("nodes: {before} -> ")), "{stdout}");

    let line = fails(&[
        "optimize",
        &src,
        "-o",
        two.to_str().unwrap(),
        "--rules",
        "bogus",
    ]);
    assert!(line.contains("unknown rule set `bogus`"), "{line}");
    let line = fails(&["optimize", &src, "-o", "/no/such/dir/out.onnx"]);
    assert!(line.contains("/no/such/dir/out.onnx"), "{line}");
}

#[test]
fn run_checks_a_model_and_its_optimised_copy_on_the_test_data() {
    let dir = corpus("gpt2_sdpa");
    let out = ok(&["run", dir.to_str().unwrap()]);
    assert!(out.contains("model: "), "{out}");
    let scratch_dir = scratch("run");
    let scratch = scratch_dir.path();
    let fused = scratch.join("fused.onnx");
    ok(&[
        "optimize",
        &model("gpt2_sdpa"),
        "-o",
        fused.to_str().unwrap(),
    ]);
    let out = ok(&[
        "run",
        dir.to_str().unwrap(),
        "--model",
        fused.to_str().unwrap(),
    ]);
    assert!(out.contains("fused.onnx"), "{out}");

    // A folder with a model but no test data.
    std::fs::copy(
        corpus("gpt2_sdpa").join("model.onnx"),
        scratch.join("model.onnx"),
    )
    .expect("copy");
    std::fs::copy(
        corpus("gpt2_sdpa").join("model.onnx.data"),
        scratch.join("model.onnx.data"),
    )
    .ok();
    let line = fails(&["run", scratch.to_str().unwrap()]);
    assert!(line.contains("no test_data_set_"), "{line}");
}

/// `run --profile` prints one row per op that ran, the fused attention among them, with
/// shares of the run that add up to the whole (kernels plus the time outside them).
#[test]
fn run_profile_lists_the_time_of_each_op() {
    let dir = corpus("gpt2_sdpa");
    let out = ok(&["run", dir.to_str().unwrap(), "--profile", "--repeat", "2"]);
    let rows: Vec<(&str, f64, f64)> = out
        .lines()
        .filter(|l| l.trim_end().ends_with('%') || l.contains("% "))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let pct = f.iter().position(|w| w.ends_with('%'))?;
            let ms: f64 = f.get(pct.checked_sub(1)?)?.parse().ok()?;
            let share: f64 = f[pct].trim_end_matches('%').parse().ok()?;
            Some((f[0], ms, share))
        })
        .collect();
    assert!(
        rows.iter().any(|r| r.0 == "scaled_dot_product_attention"),
        "no attention row:\n{out}"
    );
    assert!(
        rows.iter().any(|r| r.0 == "(outside"),
        "no outside row:\n{out}"
    );
    assert!(rows.iter().all(|r| r.1 >= 0.0 && r.2 >= 0.0), "{out}");
    let total: f64 = rows.iter().map(|r| r.2).sum();
    assert!(
        (total - 100.0).abs() < 1.0,
        "shares add up to {total}:\n{out}"
    );
    // Without the flag there is no table.
    let plain = ok(&["run", dir.to_str().unwrap()]);
    assert!(!plain.contains("(outside kernels)"), "{plain}");
}

/// The op names of `run --profile`'s table (the first word of each row with a share).
fn profile_ops(out: &str) -> Vec<String> {
    out.lines()
        .filter(|l| l.split_whitespace().any(|w| w.ends_with('%')))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// `run --executors reference` runs the graph as loaded on the reference kernels: its
/// timing line names the reference stack, its outputs are within tolerance, and its
/// profile shows the ops as loaded (no fused attention, which the default stack runs).
#[test]
fn run_executors_reference_runs_the_graph_as_loaded() {
    let dir = corpus("gpt2_sdpa");
    let out = ok(&[
        "run",
        dir.to_str().unwrap(),
        "--executors",
        "reference",
        "--profile",
    ]);
    assert!(out.contains("[reference]: best of 1"), "{out}");
    assert!(!out.contains("[default]"), "{out}");
    assert!(out.contains("all outputs within tolerance"), "{out}");
    let ops = profile_ops(&out);
    assert!(ops.iter().any(|op| op == "matmul"), "no matmul row:\n{out}");
    assert!(
        !ops.iter().any(|op| op == "scaled_dot_product_attention"),
        "the reference stack ran fused attention:\n{out}"
    );
    let fast = ok(&["run", dir.to_str().unwrap(), "--profile"]);
    assert!(
        profile_ops(&fast)
            .iter()
            .any(|op| op == "scaled_dot_product_attention"),
        "the default stack did not fuse attention:\n{fast}"
    );
}

/// The difference `run --compare` prints for one test data set: `max |a - b| X`.
fn compared(out: &str, first: &str, second: &str) -> f64 {
    let key = format!("max |{first} - {second}| ");
    let line = out
        .lines()
        .find(|l| l.contains(&key))
        .unwrap_or_else(|| panic!("no `{key}` line:\n{out}"));
    let rest = &line[line.find(&key).expect("found") + key.len()..];
    let number = rest.split([',', ' ']).next().unwrap_or_default();
    number
        .parse()
        .unwrap_or_else(|_| panic!("`{number}` is not a number in {line}"))
}

/// `run --compare` runs both stacks (the chosen one first) and prints each one's timing
/// line, their max difference (small and finite: both run the same model) and the
/// time ratio.
#[test]
fn run_compare_runs_both_stacks_and_prints_their_difference() {
    let dir = corpus("gpt2_sdpa");
    for (first, second) in [("default", "reference"), ("reference", "default")] {
        let out = ok(&[
            "run",
            dir.to_str().unwrap(),
            "--executors",
            first,
            "--compare",
        ]);
        let at = |stack: &str| {
            out.find(&format!("[{stack}]: best of 1"))
                .unwrap_or_else(|| panic!("no {stack} timing line:\n{out}"))
        };
        assert!(at(first) < at(second), "{first} runs first:\n{out}");
        let diff = compared(&out, first, second);
        assert!(
            diff.is_finite() && (0.0..1e-3).contains(&diff),
            "max difference {diff}:\n{out}"
        );
        let ratio_key = format!("time {first} / {second} ");
        let ratio: f64 = out
            .lines()
            .find_map(|l| {
                Some(
                    l[l.find(&ratio_key)? + ratio_key.len()..]
                        .trim()
                        .to_string(),
                )
            })
            .unwrap_or_else(|| panic!("no `{ratio_key}`:\n{out}"))
            .parse()
            .expect("a time ratio");
        assert!(ratio.is_finite() && ratio > 0.0, "ratio {ratio}:\n{out}");
        assert!(out.contains("all outputs within tolerance"), "{out}");
    }
}

#[test]
fn bad_arguments_are_usage_errors() {
    usage_error(&[]);
    usage_error(&["frobnicate"]);
    usage_error(&["inspect"]);
    usage_error(&["optimize", &model("bert_eager")]); // no -o
    usage_error(&["explain", &model("bert_eager")]); // no --rule
    usage_error(&["print", "--no-such-flag", &model("bert_eager")]);
    assert!(ok(&["--help"]).contains("optimize"));
    assert!(ok(&["--version"]).starts_with("graphrw "));
}

#[test]
fn missing_files_are_one_line_errors_naming_the_file() {
    let missing = "/no/such/model.onnx";
    for args in [
        vec!["inspect", missing],
        vec!["print", missing],
        vec!["dot", missing],
        vec!["explain", missing, "--rule", "attention"],
        vec!["optimize", missing, "-o", "/tmp/graphrw_cli_never.onnx"],
    ] {
        let line = fails(&args);
        assert!(line.contains(missing), "{args:?}: {line}");
    }
    let line = fails(&["run", "/no/such/dir"]);
    assert!(line.contains("/no/such/dir"), "{line}");
}

/// Files that are not ONNX models, or are broken ones: refused in one line by every
/// subcommand that reads a model.
#[test]
fn hostile_files_are_one_line_errors() {
    let scratch_dir = scratch("hostile");
    let dir = scratch_dir.path();
    let good = std::fs::read(corpus("bert_eager").join("model.onnx")).expect("model");
    let mut files: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("text", b"this is not a protobuf at all\n".to_vec()),
        (
            "random",
            (0..4096u32)
                .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
                .collect(),
        ),
        ("truncated", good[..good.len() / 3].to_vec()),
        // A field declaring a length far beyond the file.
        (
            "huge_length",
            vec![0x3a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01],
        ),
    ];
    // The model with every byte of its middle flipped.
    let mut flipped = good.clone();
    let n = flipped.len();
    for b in &mut flipped[n / 4..n / 2] {
        *b = !*b;
    }
    files.push(("flipped", flipped));
    for (what, bytes) in &files {
        let path = dir.join(format!("{what}.onnx"));
        std::fs::write(&path, bytes).expect("write");
        let p = path.to_str().unwrap();
        for args in [
            vec!["inspect", p],
            vec!["print", p],
            vec!["dot", p],
            vec!["optimize", p, "-o", dir.join("out.onnx").to_str().unwrap()],
        ] {
            let out = graphrw(&args);
            no_panic(&args, &out);
            // The empty file is a valid (empty) protobuf: refused for its empty graph.
            if out.status.success() {
                panic!("{what}: graphrw {args:?} accepted a hostile file");
            }
            let line = fails(&args);
            assert!(line.contains(p) || line.contains(what), "{what}: {line}");
        }
    }
    // A folder whose model.onnx is hostile.
    std::fs::create_dir_all(dir.join("set/test_data_set_0")).expect("mkdir");
    std::fs::write(dir.join("set/model.onnx"), b"garbage").expect("write");
    let line = fails(&["run", dir.join("set").to_str().unwrap()]);
    assert!(line.contains("model.onnx"), "{line}");
}

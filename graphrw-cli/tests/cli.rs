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
    // At one node: the first softmax as printed in the graph the attention pass sees
    // (after canonicalisation: the names `explain` uses).
    let printed = ok(&["print", &model("bert_eager"), "--before", "attention"]);
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
    // A rule set's name with `--node`: every rule of the set that starts there.
    let set = ok(&[
        "explain",
        &model("bert_eager"),
        "--rule",
        "canonical",
        "--node",
        &node,
    ]);
    assert!(set.starts_with("rule set `"), "{set}");
    assert!(set.contains(&format!("at {node} = softmax(")), "{set}");
    assert!(set.contains("rule(s) could start here"), "{set}");
}

/// `graphrw explain MODEL`: one line per site and a summary whose counts add up, the
/// same as JSON (one object per site); the hint names the `graphrw` command.
#[test]
fn explain_without_a_rule_reports_every_site() {
    let out = ok(&["explain", &model("llama_sdpa")]);
    let summary = out
        .lines()
        .find(|l| l.contains(" site(s): "))
        .unwrap_or_else(|| panic!("no summary:\n{out}"));
    let numbers: Vec<usize> = summary
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    let [sites, fused, missed] = numbers[..] else {
        panic!("summary: {summary}")
    };
    assert_eq!(sites, fused + missed, "{out}");
    let lines = out.lines().filter(|l| l.contains(": fused by `")).count();
    assert_eq!(lines, fused, "{out}");
    assert!(
        out.contains("softmax ") && out.contains("fused by `attention`"),
        "{out}"
    );
    assert!(!out.contains("cargo "), "{out}");
    let json = ok(&["explain", &model("llama_sdpa"), "--json"]);
    assert!(json.starts_with("{\"sites\": ["), "{json}");
    assert_eq!(json.matches("\"onnx_name\": ").count(), sites, "{json}");
    assert!(
        json.contains(&format!(
            "\"summary\": {{\"sites\": {sites}, \"fused\": {fused}"
        )),
        "{json}"
    );
}

/// Every rule name the report of `graphrw optimize` prints is one `graphrw explain
/// --rule` takes and `--list-rules` lists, explained on the graph its pass sees.
#[test]
fn explain_takes_every_rule_the_optimize_report_prints() {
    let scratch_dir = scratch("explain_rules");
    let out = scratch_dir.path().join("o.onnx");
    let src = model("llama_sdpa");
    let report = ok(&["optimize", &src, "-o", out.to_str().unwrap()]);
    let fired: Vec<&str> = report
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            match (words.next(), words.next(), words.next()) {
                (Some(rule), Some(n), None)
                    if l.starts_with("  ")
                        && !rule.ends_with(':')
                        && n.parse::<usize>().is_ok() =>
                {
                    Some(rule)
                }
                _ => None,
            }
        })
        .collect();
    assert!(fired.len() >= 3, "{report}");
    let listed = ok(&["explain", "--list-rules"]);
    for rule in fired {
        assert!(
            listed
                .lines()
                .any(|l| l.split_whitespace().next() == Some(rule)),
            "{rule} not listed:\n{listed}"
        );
        let text = ok(&["explain", &src, "--rule", rule]);
        assert!(text.starts_with(&format!("rule `{rule}`:")), "{text}");
        assert!(text.contains("pass sees it"), "{text}");
    }
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
        if matches!(name, "all" | "attention") {
            assert!(
                g.node_count() < before,
                "{name}: {before} -> {}",
                g.node_count()
            );
        }
        // The kernels' set is written as standard ONNX ops where there are some
        // (`RMSNormalization`, `RotaryEmbedding`): read back, the norms stay fused (a
        // `RotaryEmbedding` reads back as its decomposition, which `optimize` fuses
        // again, so the node count is not the measure here).
        if name == "kernels" {
            assert_eq!(
                g.op_counts().get("rms_norm").copied(),
                Some(4),
                "{name}: the four RMS norms, read back\n{g}"
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
    // The times come with the machine: the CPU, its vector extensions, the kernels' level.
    let cpu = out.lines().find(|l| l.starts_with("cpu: ")).unwrap_or("");
    assert!(
        cpu.contains("AVX-512") && cpu.contains("; kernels: "),
        "{out}"
    );
    let lowered = Command::new(env!("CARGO_BIN_EXE_graphrw"))
        .args(["run", dir.to_str().unwrap()])
        .env("GRAPHRW_ISA", "baseline")
        .output()
        .expect("graphrw runs");
    let lowered = String::from_utf8_lossy(&lowered.stdout);
    assert!(lowered.contains("; kernels: baseline\n"), "{lowered}");
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
    // The plan's fallbacks to decompositions are listed (a count, then each node).
    assert!(
        out.contains("node(s) ran as their decomposition (no executor took them)"),
        "{out}"
    );
    // Without the flag there is no table.
    let plain = ok(&["run", dir.to_str().unwrap()]);
    assert!(!plain.contains("(outside kernels)"), "{plain}");
    assert!(!plain.contains("ran as their decomposition"), "{plain}");
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
    usage_error(&["explain"]); // no model
    usage_error(&["explain", &model("bert_eager"), "--node", "t1"]); // no --rule
    usage_error(&["explain", &model("bert_eager"), "--rule", "x", "--json"]);
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

/// ONNX helpers for the budget tests: models built in the test.
mod built {
    use graphrw::onnx::proto::{
        AttributeProto, Dimension, DimensionValue, GraphProto, ModelProto, NodeProto,
        OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, TypeProtoTensor,
        ValueInfoProto,
    };
    use prost::Message;

    pub fn value(name: &str, elem_type: i32, dims: &[i64]) -> ValueInfoProto {
        ValueInfoProto {
            name: name.into(),
            r#type: Some(TypeProto {
                tensor_type: Some(TypeProtoTensor {
                    elem_type,
                    shape: Some(TensorShapeProto {
                        dim: dims
                            .iter()
                            .map(|&d| Dimension {
                                value: Some(DimensionValue::DimValue(d)),
                                denotation: String::new(),
                            })
                            .collect(),
                    }),
                }),
                ..Default::default()
            }),
            doc_string: String::new(),
        }
    }

    pub fn node(op: &str, inputs: &[&str], output: &str, attrs: Vec<AttributeProto>) -> NodeProto {
        NodeProto {
            op_type: op.into(),
            name: format!("n_{output}"),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: vec![output.into()],
            attribute: attrs,
            ..Default::default()
        }
    }

    pub fn int_attr(name: &str, i: i64) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            r#type: 2,
            i,
            ..Default::default()
        }
    }

    pub fn i64s(name: &str, dims: &[i64], values: &[i64]) -> TensorProto {
        TensorProto {
            name: name.into(),
            dims: dims.to_vec(),
            data_type: 7,
            int64_data: values.to_vec(),
            ..Default::default()
        }
    }

    pub fn model(
        opset: i64,
        nodes: Vec<NodeProto>,
        inits: Vec<TensorProto>,
        inputs: Vec<ValueInfoProto>,
        outputs: Vec<ValueInfoProto>,
    ) -> Vec<u8> {
        ModelProto {
            ir_version: 10,
            opset_import: vec![OperatorSetIdProto {
                domain: String::new(),
                version: opset,
            }],
            graph: Some(GraphProto {
                node: nodes,
                initializer: inits,
                input: inputs,
                output: outputs,
                name: "g".into(),
                ..Default::default()
            }),
            ..Default::default()
        }
        .encode_to_vec()
    }

    /// `Range(0, n)` sliced to its first 4 values, as `idx` (i64[4]).
    pub fn sliced_range(n: i64) -> (Vec<NodeProto>, Vec<TensorProto>) {
        (
            vec![
                node("Range", &["zero", "n", "one"], "r", vec![]),
                node("Slice", &["r", "s0", "s4"], "idx", vec![]),
            ],
            vec![
                i64s("zero", &[], &[0]),
                i64s("n", &[], &[n]),
                i64s("one", &[], &[1]),
                i64s("s0", &[1], &[0]),
                i64s("s4", &[1], &[4]),
            ],
        )
    }
}

/// `graphrw optimize` on a model whose causal mask is built from `Range(0, 2^33)`
/// sliced to 4: the rule leaves the mask unevaluated (its range is past the folding
/// budget) instead of allocating 64 GiB, and the model is written.
#[test]
fn optimize_does_not_evaluate_a_mask_past_the_budget() {
    use built::*;
    let scratch_dir = scratch("huge_range_mask");
    let dir = scratch_dir.path();
    let (mut nodes, inits) = sliced_range(1 << 33);
    nodes.extend([
        node("Unsqueeze", &["idx", "ax1"], "col", vec![]),
        node("Unsqueeze", &["idx", "ax0"], "row", vec![]),
        node("LessOrEqual", &["row", "col"], "mask", vec![]),
        node("Attention", &["q", "k", "v", "mask"], "y", vec![]),
    ]);
    let mut inits = inits;
    inits.extend([i64s("ax1", &[1], &[1]), i64s("ax0", &[1], &[0])]);
    let qkv = |n| value(n, 1, &[1, 2, 4, 8]);
    let bytes = model(
        23,
        nodes,
        inits,
        vec![qkv("q"), qkv("k"), qkv("v")],
        vec![qkv("y")],
    );
    let path = dir.join("mask.onnx");
    std::fs::write(&path, bytes).expect("write");
    let out = dir.join("out.onnx");
    ok(&[
        "optimize",
        path.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    let g = onnx::load(&out).expect("the optimised model loads");
    verify(&g).expect("and verifies");
}

/// Writes `bytes` as `dir/model.onnx` with one test data set of `x` (f32[4], ones)
/// and the output `y` (f32[4], `expected`).
fn run_dir(dir: &Path, bytes: &[u8], expected: &[f32]) {
    std::fs::create_dir_all(dir.join("test_data_set_0")).expect("mkdir");
    std::fs::write(dir.join("model.onnx"), bytes).expect("write");
    let x = graphrw::Tensor::from_vec(vec![4], vec![1.0f32; 4]).expect("x");
    let y = graphrw::Tensor::from_vec(vec![expected.len()], expected.to_vec()).expect("y");
    onnx::write_tensor_pb(dir.join("test_data_set_0/input_0.pb"), "x", &x).expect("x.pb");
    onnx::write_tensor_pb(dir.join("test_data_set_0/output_0.pb"), "y", &y).expect("y.pb");
}

/// `graphrw run` on models that would allocate past the run budget: `Range(0, 2^40)`,
/// `ConstantOfShape` and `Expand` of 2^40 elements. Each is one error line naming the
/// kernel and the budget, before any allocation; never an abort.
#[test]
fn run_refuses_tensors_past_the_run_budget() {
    use built::*;
    let scratch_dir = scratch("run_budget");
    let root = scratch_dir.path();
    let x = || vec![value("x", 1, &[4])];
    let y = || vec![value("y", 1, &[4])];
    let cast = || node("Cast", &["idx"], "f", vec![int_attr("to", 1)]);
    let (mut range, inits) = sliced_range(1 << 40);
    range.extend([cast(), node("Add", &["x", "f"], "y", vec![])]);
    let huge_range = model(18, range, inits, x(), y());
    let full = model(
        18,
        vec![
            node("ConstantOfShape", &["shape"], "c", vec![]),
            node("Slice", &["c", "s0", "s4"], "f", vec![]),
            node("Add", &["x", "f"], "y", vec![]),
        ],
        vec![
            i64s("shape", &[1], &[1 << 40]),
            i64s("s0", &[1], &[0]),
            i64s("s4", &[1], &[4]),
        ],
        x(),
        y(),
    );
    let expand = model(
        18,
        vec![
            node("Expand", &["x", "shape"], "e", vec![]),
            node(
                "ReduceMax",
                &["e", "ax"],
                "y",
                vec![int_attr("keepdims", 0)],
            ),
        ],
        vec![i64s("shape", &[2], &[1 << 38, 4]), i64s("ax", &[1], &[0])],
        x(),
        y(),
    );
    let (small, small_inits) = sliced_range(1 << 20);
    let mut small = small;
    small.extend([cast(), node("Add", &["x", "f"], "y", vec![])]);
    let small = model(18, small, small_inits, x(), y());
    for (what, bytes, kernel) in [
        ("range", &huge_range, "arange"),
        ("full", &full, "full"),
        ("expand", &expand, "expand"),
    ] {
        let dir = root.join(what);
        run_dir(&dir, bytes, &[1.0, 2.0, 3.0, 4.0]);
        for executors in ["default", "reference"] {
            let args = ["run", dir.to_str().unwrap(), "--executors", executors];
            let line = fails(&args);
            assert!(
                line.contains(kernel) && line.contains("past the budget of"),
                "{what} on {executors}: {line}"
            );
        }
    }
    // A budget set through the environment: 2^20 i64 values (8 MiB) pass the default
    // and not a 1 MiB budget.
    let dir = root.join("small");
    run_dir(&dir, &small, &[1.0, 2.0, 3.0, 4.0]);
    ok(&["run", dir.to_str().unwrap()]);
    let args = ["run", dir.to_str().unwrap()];
    let out = Command::new(env!("CARGO_BIN_EXE_graphrw"))
        .args(args)
        .env("GRAPHRW_MAX_TENSOR_BYTES", "1048576")
        .output()
        .expect("runs");
    no_panic(&args, &out);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("budget of 1.0 MiB (max_tensor_bytes)"),
        "{}",
        text(&out.stderr)
    );
}

/// A refusal's first line stays within 200 characters for a model deep in long folder
/// names and a failing node with many operands: the node is cut, the path shortened.
#[test]
fn error_lines_stay_short_for_long_paths_and_wide_nodes() {
    use built::*;
    let scratch_dir = scratch("long_paths");
    let mut dir = scratch_dir.path().to_path_buf();
    for i in 0..4 {
        dir = dir.join(format!(
            "a_rather_long_folder_name_number_{i}_{}",
            "x".repeat(30)
        ));
    }
    assert!(dir.to_str().unwrap().len() > 250);
    // A concat of 60 operands, past a 64-byte budget at run time.
    let inputs = vec!["x"; 60];
    let wide = model(
        18,
        vec![node("Concat", &inputs, "y", vec![int_attr("axis", 0)])],
        vec![],
        vec![value("x", 1, &[4])],
        vec![value("y", 1, &[240])],
    );
    run_dir(&dir, &wide, &[1.0; 240]);
    let args = ["run", dir.to_str().unwrap(), "--executors", "reference"];
    let out = Command::new(env!("CARGO_BIN_EXE_graphrw"))
        .args(args)
        .env("GRAPHRW_MAX_TENSOR_BYTES", "64")
        .output()
        .expect("runs");
    no_panic(&args, &out);
    let err = text(&out.stderr);
    let first = err.lines().next().unwrap_or("");
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        first.starts_with("error: ") && first.contains("concat"),
        "{err}"
    );
    assert!(
        first.chars().count() <= 200,
        "{} chars: {first}",
        first.chars().count()
    );
    // A malformed node in a model at that path: the node and the reason first, the
    // path shortened after them.
    let bad = model(
        18,
        vec![node("Concat", &inputs, "y", vec![])],
        vec![],
        vec![value("x", 1, &[4])],
        vec![value("y", 1, &[240])],
    );
    let path = dir.join("malformed_model_with_a_long_name.onnx");
    std::fs::write(&path, bad).expect("write");
    for cmd in ["inspect", "print"] {
        let line = fails(&[cmd, path.to_str().unwrap()]);
        assert!(line.chars().count() <= 200, "{line}");
        assert!(
            line.starts_with("error: malformed Concat node n_y: attribute `axis` is required"),
            "{line}"
        );
        assert!(
            line.ends_with("malformed_model_with_a_long_name.onnx)"),
            "{line}"
        );
    }
}

/// Shape arithmetic of models with dynamic axes (`fuzz/seeds/dynamic_*.onnx`): a head
/// split computed with `Shape`/`Gather`/`Concat` runs at a shape of the test's choosing;
/// hostile arithmetic (a size past 2^64, a negative size, a `Range` whose length is
/// known only at run time and is past the budget) is one error line or an opaque node,
/// never a panic or a huge allocation.
#[test]
fn shape_arithmetic_runs_at_any_shape_and_hostile_sizes_are_refused() {
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds");
    let dir = scratch("dynamic");
    let seed = |name: &str| seeds.join(format!("{name}.onnx"));
    let data = |name: &str, x: &graphrw::Tensor, y: Option<&graphrw::Tensor>| {
        let d = dir.path().join(name);
        std::fs::create_dir_all(d.join("test_data_set_0")).expect("mkdir");
        std::fs::copy(seed(name), d.join("model.onnx")).expect("copy");
        onnx::write_tensor_pb(d.join("test_data_set_0/input_0.pb"), "x", x).expect("x.pb");
        if let Some(y) = y {
            onnx::write_tensor_pb(d.join("test_data_set_0/output_0.pb"), "y", y).expect("y.pb");
        }
        d.display().to_string()
    };
    let values: Vec<f32> = (0..3 * 5 * 64).map(|i| i as f32 * 0.01).collect();
    let x = graphrw::Tensor::from_vec(vec![3, 5, 64], values.clone()).expect("x");
    let y = graphrw::Tensor::from_vec(vec![3, 5, 4, 16], values).expect("y");
    let split = data("dynamic_head_split", &x, Some(&y));
    let out = ok(&["run", &split]);
    assert!(out.contains("within tolerance"), "{out}");
    let printed = ok(&["print", &seed("dynamic_head_split").display().to_string()]);
    assert!(
        printed.contains("reshape(x, shape=[batch, seq, 4, 16])"),
        "{printed}"
    );
    let x2 = graphrw::Tensor::from_vec(vec![2, 3], vec![1.0f32; 6]).expect("x");
    let range = data("dynamic_range", &x2, None);
    let line = fails(&["run", &range]);
    assert!(line.contains("past the budget"), "{line}");
    for name in ["dynamic_overflow", "dynamic_negative"] {
        let path = seed(name).display().to_string();
        for args in [
            vec!["inspect", path.as_str()],
            vec!["run", &data(name, &x2, None)],
        ] {
            let out = graphrw(&args);
            no_panic(&args, &out);
            let err = text(&out.stderr);
            assert!(
                out.status.success()
                    || err.lines().next().is_some_and(|l| l.starts_with("error: ")),
                "graphrw {args:?}: {err}"
            );
        }
    }
}

#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    // `graphrw ops | head -1`, with the reader gone before graphrw writes anything.
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_graphrw"))
        .arg("ops")
        .stdout(writer)
        .output()
        .expect("graphrw runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(141), "{err}");
}

/// `run --paced` (for benches that alternate runtimes run by run): `ready` once the model
/// is planned, one run per line read on stdin with its time, and the end of stdin ends
/// the runs early; the outputs are still checked.
#[test]
fn a_paced_run_runs_once_per_line_read() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;

    let dir = corpus("gpt2_sdpa");
    let mut child = Command::new(env!("CARGO_BIN_EXE_graphrw"))
        .args(["run", dir.to_str().unwrap(), "--paced", "--repeat", "5"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("graphrw runs");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut next_line = || lines.next().expect("a line before the end").expect("utf-8");
    let mut seen = Vec::new();
    while seen.last().map(String::as_str) != Some("ready") {
        seen.push(next_line());
    }
    for n in 1..=2 {
        writeln!(stdin).expect("write a line");
        let line = next_line();
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words.len(), 4, "{line}");
        assert_eq!(
            (words[0], words[1], words[3]),
            ("run", &*n.to_string(), "ms")
        );
        let ms: f64 = words[2].parse().expect("a time");
        assert!(ms > 0.0, "{line}");
    }
    drop(stdin);
    let rest: Vec<String> =
        std::iter::from_fn(|| lines.next().map(|l| l.expect("utf-8"))).collect();
    let status = child.wait().expect("graphrw ends");
    assert!(status.success(), "{rest:?}");
    assert!(rest.iter().any(|l| l.contains("best of 2 ")), "{rest:?}");
    assert!(rest.iter().all(|l| !l.starts_with("run ")), "{rest:?}");
    assert!(
        rest.iter()
            .any(|l| l.contains("all outputs within tolerance")),
        "{rest:?}"
    );
}

/// `--assume SYMBOL>=N` loads the model with the bound (printed with the graph), and a
/// bound that does not parse is a usage error.
#[test]
fn assume_gives_a_symbol_a_lower_bound() {
    let dynamic = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../graphrw/tests/models/onnxscript_for_ort/electra_dynamo.onnx")
        .display()
        .to_string();
    let plain = ok(&["print", &dynamic]);
    assert!(!plain.contains("seq>=3"), "{plain}");
    let bounded = ok(&["print", &dynamic, "--assume", "seq>=3,batch>=2"]);
    let line = bounded
        .lines()
        .find(|l| l.trim_start().starts_with("assume") && l.contains(">="))
        .unwrap_or_else(|| panic!("no bounds line:\n{bounded}"));
    assert!(
        line.contains("seq>=3") && line.contains("batch>=2"),
        "{line}"
    );
    for bad in ["seq>=x", "seq", ">=1"] {
        let err = usage_error(&["print", &dynamic, "--assume", bad]);
        assert!(err.contains("--assume"), "{bad}: {err}");
    }
}

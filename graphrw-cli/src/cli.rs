//! The `graphrw` command's arguments and dispatch ([`main_with`]), shared by the binary
//! and the Python package, so that both have every subcommand, `--help` and
//! `--version`, defined once.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::commands;

/// Rewrite and run machine-learning computation graphs.
///
/// graphrw reads ONNX models (with their external data) into a graph over a torch-like
/// op vocabulary. Start with `graphrw inspect model.onnx` to see what a model holds,
/// `graphrw print model.onnx` to read it as a program, and `graphrw run MODEL_DIR` to
/// check it against the ONNX test data beside it.
#[derive(Parser)]
#[command(name = "graphrw", version, about, long_about, after_help = commands::env::help_section())]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Assume a lower bound on a symbolic dim for every run (`--assume seq>=1`;
    /// repeat the flag, or separate bounds with commas). The model is loaded with it,
    /// so shape arithmetic folds further (`max(seq, 1)` is `seq`); it is saved with
    /// the model, and a run whose inputs break it fails naming the input.
    #[arg(long, global = true, value_name = "SYMBOL>=N")]
    assume: Vec<String>,
}

#[derive(Subcommand)]
enum Command {
    /// List the op vocabulary: every op with its operands and attributes.
    ///
    /// Example: `graphrw ops softmax` shows one op; `graphrw ops` shows all.
    Ops {
        /// Show only ops whose name contains this text.
        filter: Option<String>,
    },
    /// Summarise a model: ops with counts, inputs and outputs.
    ///
    /// Shows the node count, the constants' size, each op with its count, and the
    /// inputs and outputs with their dtypes and shapes.
    ///
    /// Example: `graphrw inspect ../shared/corpus/bert_eager/model.onnx`
    Inspect {
        /// The ONNX model file (external data is read from its folder).
        model: PathBuf,
    },
    /// Print a model as a program, one op per line.
    ///
    /// Each line is one op with its output metadata:
    /// `t7 = softmax(t6, dim=-1)  # f32[1, 4, 16, 16]`.
    ///
    /// Example: `graphrw print model.onnx | less`
    Print {
        /// The ONNX model file.
        model: PathBuf,
        /// Print the graph as the pipeline has it when this pass runs (`canonical`,
        /// `attention`, `norm-spellings`, `kernels`, `unweighted-rms-norms`), or the
        /// pass that runs this rule: the names `graphrw explain` gives.
        #[arg(long, value_name = "PASS_OR_RULE")]
        before: Option<String>,
    },
    /// Write a model as a Graphviz DOT graph.
    ///
    /// Example: `graphrw dot model.onnx -o model.dot && dot -Tsvg model.dot -o model.svg`
    Dot {
        /// The ONNX model file.
        model: PathBuf,
        /// Write to this file instead of standard output.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Fill in the nodes of every match of this built-in rule (e.g. `attention`).
        #[arg(long, value_name = "RULE")]
        highlight: Option<String>,
    },
    /// Explain which sites of a model fused and why the others did not, or why one
    /// built-in rule matches or not.
    ///
    /// Without `--rule`: one line per site where a fusion could start (every softmax,
    /// normalisation, GELU, gate, rotation), with the rule that fused it or the nearest
    /// rule and its first failing check, then a summary (`--json` for tools). With
    /// `--rule`: the rule's near misses over the model, deepest first, or with `--node`
    /// where matching stopped at that node and why; with a rule set's name (`canonical`,
    /// a kernel's) and `--node`, why no rule of the set fires there. Always on the graph
    /// as the pipeline has it when the rule runs (after canonicalisation), whose names
    /// `graphrw print MODEL --before PASS` shows.
    ///
    /// Example: `graphrw explain model.onnx`, `graphrw explain model.onnx --rule
    /// attention --node t41`, `graphrw explain --list-rules`
    Explain {
        /// The ONNX model file.
        #[arg(required_unless_present = "list_rules")]
        model: Option<PathBuf>,
        /// The rule's name: any the report of `graphrw optimize` prints (see
        /// `--list-rules`).
        #[arg(long, value_name = "NAME")]
        rule: Option<String>,
        /// The node: its printed name (`t41`) or its ONNX name.
        #[arg(long, value_name = "N", requires = "rule")]
        node: Option<String>,
        /// List every built-in rule, its rule set and the pass that runs it.
        #[arg(long)]
        list_rules: bool,
        /// The site report as JSON.
        #[arg(long, conflicts_with = "rule")]
        json: bool,
    },
    /// Apply rule sets (by default: attention fusion) and write the result as ONNX.
    ///
    /// Reports every rule that fired and how often, the fused kernels made and the node
    /// count before and after. A fused attention node is written as the standard ONNX
    /// `Attention` op (opset 23), a generated kernel as its standard ONNX op where one
    /// exists (LayerNormalization, RMSNormalization, Gelu, RotaryEmbedding where its
    /// caches provably have equal halves; opset raised as needed) or else as a model-local
    /// function (domain `graphrw`) whose body is its decomposition; onnxruntime runs both.
    ///
    /// Example: `graphrw optimize model.onnx -o fused.onnx && graphrw run . --model fused.onnx`
    Optimize {
        /// The ONNX model file.
        model: PathBuf,
        /// Where to write the optimised model.
        #[arg(short, long, value_name = "OUT")]
        output: PathBuf,
        /// Rule sets to apply, in one pass: `all` (the default: attention fusion, causal
        /// masks, normalisation spellings, then the generated kernels), `canonical`,
        /// `attention`, `norms` (the spellings of an RMS norm brought to one form),
        /// `kernels` (every generated kernel) or one kernel (`rms_norm`, `bias_gelu`,
        /// ...). Repeatable.
        #[arg(long = "rules", value_name = "NAME")]
        rules: Vec<String>,
        /// Write every weight inline in the one OUT file (refused when it would pass
        /// protobuf's 2 GiB limit). By default the input's layout is kept: weights that
        /// came from external data go to `OUT.data`, copied as file ranges.
        #[arg(long, conflicts_with = "external_data")]
        single_file: bool,
        /// Write every weight of 1 KiB or more to an external data file beside OUT,
        /// whatever the input's layout.
        #[arg(long)]
        external_data: bool,
        /// The external data file's name, in OUT's folder (default: OUT's file name
        /// plus `.data`).
        #[arg(long, value_name = "NAME")]
        data_file: Option<String>,
    },
    /// Run a model on its ONNX test data and report the max error and time.
    ///
    /// Runs `test_data_set_*/input_N.pb` and compares with `output_N.pb` (within 1e-4
    /// absolute plus 1e-3 relative). By default the model is optimised by the built-in
    /// rules and run on the default executor stack (fused kernels, tile executor,
    /// reference kernels); `--executors reference` runs it as loaded on the reference
    /// kernels. Prints the best time of `--repeat N` runs and the peak live memory.
    /// Exits with code 1 when an output is beyond tolerance. A tensor past the run
    /// budget (`GRAPHRW_MAX_TENSOR_BYTES` bytes; default: the machine's memory) is an
    /// error before it is allocated. The kernels' options (instruction set, threads,
    /// weight packing, attention tuning) come from the `GRAPHRW_*` variables listed
    /// in `graphrw --help`.
    ///
    /// Example: `graphrw run ../shared/corpus/llama_sdpa --repeat 5 --compare`
    Run {
        /// A folder holding `model.onnx` and `test_data_set_*/`.
        model_dir: PathBuf,
        /// Run this model file instead of `MODEL_DIR/model.onnx` (for example an
        /// optimised copy) on the folder's test data.
        #[arg(long, value_name = "FILE")]
        model: Option<PathBuf>,
        /// Where to run: `cpu` (the reference executor), or `cuda` / `cuda:N` (the CUDA
        /// stack; needs a build with `--features cuda`), which also reports cold and
        /// warm run times and device memory.
        #[arg(long, value_name = "DEVICE", default_value = "cpu")]
        device: commands::device::Device,
        /// The executor stack: `default` (optimised graph, fused kernels) or
        /// `reference` (the graph as loaded, reference kernels).
        #[arg(long, value_enum, default_value = "default")]
        executors: commands::run::Executors,
        /// Timed runs per test data set; the best time is printed.
        #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        repeat: u32,
        /// Also run the other stack and print the max difference and the time ratio.
        #[arg(long)]
        compare: bool,
        /// Print where the best run's time went: time, share and calls per op
        /// (fused ops under their own names), largest first.
        #[arg(long)]
        profile: bool,
        /// For benches that alternate graphrw with another runtime run by run: print
        /// `ready` once the model is planned, then wait for a line on stdin before each
        /// timed run (up to `--repeat`, or the end of stdin) and print `run N T ms`
        /// after it.
        #[arg(long)]
        paced: bool,
    },
}

/// Parses `args` (the program's name first, as `std::env::args_os` gives them) and runs
/// the subcommand: the `graphrw` binary's `main`, and the Python package's `graphrw`
/// command (`python -m graphrw`). Help, `--version` and argument errors print as clap
/// prints them. Returns the exit code: 0 on success, 1 on an error (printed as one
/// `error: ...` line on stderr) or an output beyond tolerance, 2 on bad arguments.
pub fn main_with<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return u8::try_from(e.exit_code()).unwrap_or(2);
        }
    };
    // The one place the environment is read: `GRAPHRW_*` onto the kernel options,
    // installed for everything this thread runs (folding included) and given to plans.
    let options = match commands::env::options_from_env() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {}", commands::error_text(&e));
            return 1;
        }
    };
    let _options = options.install();
    let mut bounds = graphrw::ir::sym::bounds::Bounds::new();
    for text in &cli.assume {
        match graphrw::ir::sym::bounds::Bounds::parse(text) {
            Ok(b) => bounds = bounds.merge(&b),
            Err(e) => {
                eprintln!("error: --assume: {}", commands::error_text(&e));
                return 2;
            }
        }
    }
    // Every model a command loads is loaded with the bounds in force.
    let (result, _) = graphrw::ir::sym::in_force::with(&bounds, || dispatch(cli.command, options));
    match result {
        Ok(code) if code == ExitCode::SUCCESS => 0,
        Ok(_) => 1,
        Err(e) => {
            eprintln!("error: {}", commands::error_text(&e.to_string()));
            1
        }
    }
}

/// Runs one subcommand.
fn dispatch(command: Command, options: graphrw::KernelOptions) -> commands::CmdResult {
    match command {
        Command::Ops { filter } => commands::ops::run(filter.as_deref()),
        Command::Inspect { model } => commands::inspect::run(&model),
        Command::Print { model, before } => commands::print::run(&model, before.as_deref()),
        Command::Dot {
            model,
            output,
            highlight,
        } => commands::dot::run(&model, output.as_deref(), highlight.as_deref()),
        Command::Explain {
            model,
            rule,
            node,
            list_rules,
            json,
        } => commands::explain::run(
            model.as_deref(),
            rule.as_deref(),
            node.as_deref(),
            list_rules,
            json,
        ),
        Command::Optimize {
            model,
            output,
            rules,
            single_file,
            external_data,
            data_file,
        } => {
            let layout = if single_file {
                graphrw::onnx::WeightLayout::SingleFile
            } else if external_data {
                graphrw::onnx::WeightLayout::External
            } else {
                graphrw::onnx::WeightLayout::Keep
            };
            let save = graphrw::onnx::SaveOptions {
                layout,
                data_file,
                ..Default::default()
            };
            commands::optimize::run(&model, &output, &rules, &save)
        }
        Command::Run {
            model_dir,
            model,
            device,
            executors,
            repeat,
            compare,
            profile,
            paced,
        } => commands::device::run(
            &model_dir,
            model.as_deref(),
            device,
            &commands::run::RunOptions {
                executors,
                repeat: repeat as usize,
                compare,
                profile,
                paced,
                kernel: options,
            },
        ),
    }
}

//! `graphrw`: inspect, optimise and run computation graphs from the command line.

use clap::{Parser, Subcommand};

use graphrw::ops::{AttrDefault, OpRegistry};

/// Rewrite and run machine-learning computation graphs.
#[derive(Parser)]
#[command(name = "graphrw", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
}

fn main() {
    let cli = Cli::parse();
    match cli.command {
        Command::Ops { filter } => list_ops(filter.as_deref()),
    }
}

fn list_ops(filter: Option<&str>) {
    let registry = OpRegistry::with_builtins();
    for op in registry.iter() {
        if filter.is_some_and(|f| !op.name.contains(f)) {
            continue;
        }
        let operands: Vec<String> = op.operands.iter().map(|o| o.name.to_string()).collect();
        let attrs: Vec<String> = op
            .attrs
            .iter()
            .map(|a| match a.default.value() {
                None => format!("{}: {}", a.name, a.kind),
                Some(_) if a.default == AttrDefault::Null => format!("{}: {}?", a.name, a.kind),
                Some(v) => format!("{}: {} = {v}", a.name, a.kind),
            })
            .collect();
        let sig = operands.into_iter().chain(attrs).collect::<Vec<_>>().join(", ");
        println!("{}({sig})\n    {}", op.name, op.doc);
    }
}

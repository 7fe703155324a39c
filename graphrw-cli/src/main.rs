//! `graphrw`: inspect, print, draw and run computation graphs from the command line.
//!
//! Each subcommand lives in its own module under `commands/`; the arguments and the
//! dispatch are `graphrw_cli::cli`, which the Python package's `graphrw` command runs too.

#![warn(missing_docs)]

use std::process::ExitCode;

/// mimalloc: loading and rewriting a big model makes and frees millions of small
/// allocations (names, attribute lists, shapes); see README "Scaling".
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    graphrw_cli::commands::end_quietly_on_closed_stdout();
    ExitCode::from(graphrw_cli::cli::main_with(std::env::args_os()))
}

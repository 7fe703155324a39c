//! `graphrw print MODEL`: the model as a program.

use std::path::Path;
use std::process::ExitCode;

use super::CmdResult;

/// Prints the program (the graph's `Display`).
pub fn run(model: &Path) -> CmdResult {
    let graph = super::load(model)?;
    print!("{graph}");
    Ok(ExitCode::SUCCESS)
}

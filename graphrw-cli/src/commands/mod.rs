//! One module per subcommand. Each `run` returns the exit code, or an error that
//! `main` prints as one line.

pub mod device;
pub mod dot;
pub mod explain;
pub mod inspect;
pub mod ops;
pub mod optimize;
pub mod print;
pub mod run;

use std::path::Path;

/// What a subcommand returns.
pub type CmdResult = Result<std::process::ExitCode, Box<dyn std::error::Error>>;

/// Loads an ONNX model, the error naming the file.
pub fn load(path: &Path) -> Result<graphrw::Graph, Box<dyn std::error::Error>> {
    graphrw::onnx::load(path).map_err(|e| match e {
        // I/O errors already name the file.
        graphrw::onnx::OnnxError::Io { .. } => e.to_string().into(),
        e => format!("{}: {e}", path.display()).into(),
    })
}

/// `names` joined with `, ` within `budget` characters: as many as fit, then
/// `... (N in all)`, so an error listing them stays one short line.
pub fn name_list(names: &[&str], budget: usize) -> String {
    let mut out = String::new();
    for name in names {
        let sep = if out.is_empty() { "" } else { ", " };
        if out.len() + sep.len() + name.len() > budget {
            out.push_str(&format!("{sep}... ({} in all)", names.len()));
            return out;
        }
        out.push_str(sep);
        out.push_str(name);
    }
    out
}

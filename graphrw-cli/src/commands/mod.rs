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

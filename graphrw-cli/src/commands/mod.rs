//! One module per subcommand. Each `run` returns the exit code, or an error that
//! `main` prints as one line.

pub mod coverage_json;
pub mod device;
pub mod dot;
pub mod env;
pub mod explain;
pub mod inspect;
pub mod ops;
pub mod optimize;
pub mod print;
pub mod run;

use std::path::Path;

/// What a subcommand returns.
pub type CmdResult = Result<std::process::ExitCode, Box<dyn std::error::Error>>;

/// Loads an ONNX model, the error naming the file after the reason (the node and what
/// is wrong come first; the file, shortened by [`short_path`], last).
pub fn load(path: &Path) -> Result<graphrw::Graph, Box<dyn std::error::Error>> {
    graphrw::onnx::load(path).map_err(|e| match e {
        graphrw::onnx::OnnxError::Io { source, .. } => {
            format!("{source} (file {})", short_path(path)).into()
        }
        e => format!("{e} (file {})", short_path(path)).into(),
    })
}

/// The longest file path an error line shows.
pub const PATH_TEXT_MAX: usize = 60;

/// `path` as shown in an error line: whole when short, else its end (the file name and
/// the folders nearest it) after `...`, within [`PATH_TEXT_MAX`] characters.
pub fn short_path(path: &Path) -> String {
    let text = path.display().to_string();
    let n = text.chars().count();
    if n <= PATH_TEXT_MAX {
        return text;
    }
    let tail: String = text.chars().skip(n - (PATH_TEXT_MAX - 3)).collect();
    format!("...{tail}")
}

/// The longest first line of an error message (`error: ` included).
pub const ERROR_LINE_MAX: usize = 200;

/// `message` with its first line cut to fit [`ERROR_LINE_MAX`] after `error: ` (ending
/// in `...`); the lines after it are kept. The causes themselves keep their first
/// lines short (nodes and paths are shortened); this is the last guard.
pub fn error_text(message: &str) -> String {
    let budget = ERROR_LINE_MAX - "error: ".len();
    let (first, rest) = match message.split_once('\n') {
        Some((f, r)) => (f, Some(r)),
        None => (message, None),
    };
    let mut out = if first.chars().count() <= budget {
        first.to_string()
    } else {
        let cut: String = first.chars().take(budget - 3).collect();
        format!("{cut}...")
    };
    if let Some(rest) = rest {
        out.push('\n');
        out.push_str(rest);
    }
    out
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

/// The exit status of a command whose standard output was closed before it finished
/// (`graphrw ops | head -3`): 128 + SIGPIPE, what a shell reports for a Unix tool the
/// closed pipe stopped.
pub const CLOSED_STDOUT_STATUS: i32 = 141;

/// Makes a closed standard output end the process quietly with
/// [`CLOSED_STDOUT_STATUS`], as other Unix tools end, instead of the panic and backtrace
/// of Rust's `println!` (which panics on a write error, and Rust ignores SIGPIPE).
/// Every other panic still goes to the hook that was installed before.
pub fn end_quietly_on_closed_stdout() {
    let earlier = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("os error 32") {
            std::process::exit(CLOSED_STDOUT_STATUS);
        }
        earlier(info)
    }));
}

//! The code behind the `graphrw` command, as a library: each subcommand is a module of
//! [`commands`] whose `run` returns the exit code or an error of one line.
//!
//! [`cli`] parses the arguments and calls these, for the `graphrw` binary and for the
//! Python package's `graphrw` command alike, so the command's behaviour and output are
//! defined once.

#![warn(missing_docs)]

pub mod cli;
pub mod commands;

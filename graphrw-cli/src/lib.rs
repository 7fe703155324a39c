//! The code behind the `graphrw` command, as a library: each subcommand is a module of
//! [`commands`] whose `run` returns the exit code or an error of one line.
//!
//! The `graphrw` binary parses the arguments and calls these; the Python package
//! (`python -m graphrw`) calls the same functions, so the command's behaviour and output
//! are defined once.

#![warn(missing_docs)]

pub mod commands;

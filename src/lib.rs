//! The unpublished root package of the graphrw workspace: it owns the workspace-wide
//! integration tests (`tests/`), examples (`examples/`) and benchmarks (`benches/`).
//! It has no API of its own; use the `graphrw` crate.

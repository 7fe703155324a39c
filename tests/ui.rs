//! The trybuild UI suite of the pattern macros: `tests/ui/fail/*.rs` must fail to compile
//! with the message in their `.stderr` snapshot; `tests/ui/pass/*.rs` must compile and run.
//! Regenerate snapshots with `TRYBUILD=overwrite cargo test --test ui` and review them.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
    t.pass("tests/ui/pass/*.rs");
}

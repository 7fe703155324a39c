//! `graphrw ops [FILTER]`: the op vocabulary.

use std::process::ExitCode;

use graphrw::ops::{AttrDefault, OpRegistry};

use super::CmdResult;

/// Lists every op whose name contains `filter` with its signature and doc line.
pub fn run(filter: Option<&str>) -> CmdResult {
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
        let sig = operands
            .into_iter()
            .chain(attrs)
            .collect::<Vec<_>>()
            .join(", ");
        println!("{}({sig})\n    {}", op.name, op.doc);
    }
    Ok(ExitCode::SUCCESS)
}

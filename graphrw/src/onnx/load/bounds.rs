//! Bounds a model file states: graphrw's own key, and torch's range constraints.
//!
//! - `graphrw.bounds` in the model's `metadata_props` ([`BOUNDS_KEY`]): what
//!   [`crate::onnx::save`] writes for [`Graph::bounds`](crate::graph::Graph::bounds),
//!   `seq>=1, past>=2` (read by [`Bounds::parse`]).
//! - torch's dynamo exporter writes the ranges of its symbols in the graph's
//!   `metadata_props` under `pkg.torch.export.ExportedProgram.range_constraints`:
//!   `{s77: VR[1, int_oo], s27: VR[2, 100]}`. Those are torch's own symbol names: a
//!   dim exported with `Dim.DYNAMIC` or `Dim.AUTO` keeps that name as its `dim_param`,
//!   and its lower bound is read; a dim given a name (`Dim("seq", min=2)`) is renamed
//!   in the file while the constraint keeps `s27`, and nothing in the file links the
//!   two, so that bound is not read (give it again with `--assume seq>=2`). Only
//!   symbols some graph input's `dim_param` names are read.

use crate::ir::sym::bounds::Bounds;
use crate::onnx::proto::{DimensionValue, GraphProto, StringStringEntryProto};
use crate::onnx::OnnxError;

/// The `metadata_props` key graphrw saves a graph's bounds under.
pub const BOUNDS_KEY: &str = "graphrw.bounds";

/// The graph `metadata_props` key of torch's range constraints.
const TORCH_RANGES: &str = "pkg.torch.export.ExportedProgram.range_constraints";

/// The bounds `model_props` (the model's `metadata_props`) and `graph` state; an error
/// names a `graphrw.bounds` value that does not read.
pub(crate) fn file_bounds(
    model_props: &[StringStringEntryProto],
    graph: &GraphProto,
) -> Result<Bounds, OnnxError> {
    let mut out = Bounds::new();
    for p in model_props.iter().filter(|p| p.key == BOUNDS_KEY) {
        let b = Bounds::parse(&p.value)
            .map_err(|e| OnnxError::Model(format!("metadata `{BOUNDS_KEY}`: {e}")))?;
        out = out.merge(&b);
    }
    let named = |s: &str| {
        graph.input.iter().any(|vi| {
            let shape = vi.r#type.as_ref().and_then(|t| t.tensor_type.as_ref());
            shape.and_then(|t| t.shape.as_ref()).is_some_and(|sh| {
                sh.dim
                    .iter()
                    .any(|d| matches!(&d.value, Some(DimensionValue::DimParam(p)) if p == s))
            })
        })
    };
    for p in graph
        .metadata_props
        .iter()
        .filter(|p| p.key == TORCH_RANGES)
    {
        for (s, lo) in torch_ranges(&p.value) {
            if named(s) {
                out = out.at_least(s, lo);
            }
        }
    }
    Ok(out)
}

/// `(symbol, lower bound)` of each `name: VR[lo, hi]` in `{...}` with an integer `lo`
/// (anything else is skipped).
fn torch_ranges(text: &str) -> Vec<(&str, i64)> {
    let inner = text.trim().trim_start_matches('{').trim_end_matches('}');
    inner
        .split(']')
        .filter_map(|item| {
            let (name, range) = item.trim_start_matches([',', ' ']).split_once(':')?;
            let lo = range.trim().strip_prefix("VR[")?.split(',').next()?;
            Some((name.trim(), lo.trim().parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torch_ranges_read_each_integer_lower_bound() {
        let r = torch_ranges("{s77: VR[1, int_oo], s27: VR[2, 100], u0: VR[-int_oo, 4]}");
        assert_eq!(r, vec![("s77", 1), ("s27", 2)]);
        assert!(torch_ranges("{}").is_empty());
        assert!(torch_ranges("nonsense").is_empty());
    }
}

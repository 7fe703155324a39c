//! The broadcast plan of a generated kernel: output shape, rows, operand strides.

use crate::broadcast::{broadcast_shapes, broadcast_strides};
use crate::KernelError;

/// How a generated kernel walks its output: rows of `inner` elements (the last
/// dimension, or for purely elementwise kernels the longest run of dimensions every
/// operand walks contiguously), and for each operand its stride along a row (0 when
/// broadcast, else 1) and its offsets for each row.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The broadcast output shape.
    pub out_shape: Vec<usize>,
    /// Elements per row.
    pub inner: usize,
    /// Number of rows.
    pub rows: usize,
    outer: Vec<usize>,
    /// Per operand: strides over `outer`, then the stride along a row.
    strides: Vec<(Vec<usize>, usize)>,
}

impl Plan {
    /// Plans operands of `shapes` broadcast together. With `keep_last`, rows are exactly
    /// the last output dimension (kernels that reduce over it); otherwise dimensions are
    /// merged where every operand is contiguous across them.
    pub fn new(
        op: &'static str,
        shapes: &[&[usize]],
        keep_last: bool,
    ) -> Result<Plan, KernelError> {
        let mut out_shape: Vec<usize> = Vec::new();
        for s in shapes {
            out_shape = broadcast_shapes(&out_shape, s).ok_or_else(|| KernelError::Broadcast {
                op,
                lhs: out_shape.clone(),
                rhs: s.to_vec(),
            })?;
        }
        let full: Vec<Vec<usize>> = shapes
            .iter()
            .map(|s| broadcast_strides(s, &out_shape))
            .collect();
        // Dimensions to walk: (size, per-operand strides).
        let mut dims: Vec<(usize, Vec<usize>)> = Vec::new();
        let rank = out_shape.len();
        for (i, &d) in out_shape.iter().enumerate() {
            let st: Vec<usize> = full.iter().map(|f| f[i]).collect();
            let last = i + 1 == rank;
            if d == 1 && !(keep_last && last) {
                continue;
            }
            if let Some((pd, ps)) = dims.last_mut() {
                let mergeable = !keep_last || !last;
                if mergeable && ps.iter().zip(&st).all(|(&p, &s)| p == s * d) {
                    *pd *= d;
                    *ps = st;
                    continue;
                }
            }
            dims.push((d, st));
        }
        if dims.is_empty() || (keep_last && rank == 0) {
            dims.push((1, vec![0; shapes.len()]));
        }
        let (inner, inner_strides) = dims.pop().expect("at least one dim");
        let outer: Vec<usize> = dims.iter().map(|(d, _)| *d).collect();
        let rows = outer.iter().product::<usize>();
        let strides = (0..shapes.len())
            .map(|k| {
                let own: Vec<usize> = dims.iter().map(|(_, s)| s[k]).collect();
                {
                    debug_assert!(
                        inner_strides[k] <= 1,
                        "a contiguous operand walks a row with stride 0 or 1"
                    );
                    (own, inner_strides[k].min(1))
                }
            })
            .collect();
        Ok(Plan {
            out_shape,
            inner,
            rows,
            outer,
            strides,
        })
    }

    /// Total output elements.
    pub fn numel(&self) -> usize {
        self.rows * self.inner
    }

    /// Where operand `k` starts in `row`, and its stride along the row (0 or 1).
    #[inline]
    pub fn row_start(&self, k: usize, row: usize) -> (usize, usize) {
        let (st, inner) = &self.strides[k];
        let mut rem = row;
        let mut off = 0;
        for (d, s) in self.outer.iter().zip(st).rev() {
            off += (rem % d) * s;
            rem /= d;
        }
        (off, *inner)
    }

    /// Whether operand `k` moves from row to row (false when every row reads the same
    /// values: a weight or bias broadcast over the rows).
    #[inline]
    pub fn varies_by_row(&self, k: usize) -> bool {
        self.strides[k].0.iter().any(|&s| s != 0)
    }

    /// The number of operands planned.
    pub fn operands(&self) -> usize {
        self.strides.len()
    }
}

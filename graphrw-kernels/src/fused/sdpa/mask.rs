//! The attention mask, read through broadcast strides (never materialised at the
//! scores' shape).

use crate::broadcast::{broadcast_shapes, broadcast_strides};
use crate::{Element, KernelError};

/// The elements of a mask: boolean (`true` attends) or additive in the query dtype.
#[derive(Clone, Copy)]
pub(super) enum MaskData<'a, T> {
    /// `false` masks the score with `-inf`.
    Bool(&'a [bool]),
    /// Added to the (scaled) score.
    Add(&'a [T]),
}

/// A mask viewed at the scores' shape `[batch..., Hq, Sq, Skv]` through strides.
pub(super) struct MaskView<'a, T> {
    pub data: MaskData<'a, T>,
    /// Element offset of each (batch, head) pair, in `batch * Hq + h` order.
    pub head_offsets: Vec<usize>,
    /// Stride between query rows (0 when broadcast).
    pub row_stride: usize,
    /// Stride between keys (0 when broadcast).
    pub col_stride: usize,
}

impl<'a, T: Element> MaskView<'a, T> {
    /// Checks that `shape` broadcasts to `score_shape` and builds the strided view.
    pub fn new(
        data: MaskData<'a, T>,
        shape: &[usize],
        score_shape: &[usize],
    ) -> Result<Self, KernelError> {
        if broadcast_shapes(shape, score_shape).as_deref() != Some(score_shape) {
            return Err(KernelError::Shape {
                op: "sdpa",
                msg: format!("mask {shape:?} does not broadcast to the scores {score_shape:?}"),
            });
        }
        let r = score_shape.len();
        let st = broadcast_strides(shape, score_shape);
        // Offsets of every (batch..., head) index, row-major over score_shape[..r-2].
        let mut head_offsets = vec![0usize];
        for (&n, &s) in score_shape[..r - 2].iter().zip(&st[..r - 2]) {
            head_offsets = head_offsets
                .iter()
                .flat_map(|&o| (0..n).map(move |i| o + i * s))
                .collect();
        }
        Ok(MaskView {
            data,
            head_offsets,
            row_stride: st[r - 2],
            col_stride: st[r - 1],
        })
    }
}

//! Shape broadcasting and strided iteration: the helpers every elementwise and layout
//! kernel (and generated fused kernels) are built on.
//!
//! Strides here are in elements, over contiguous row-major storage; a stride of 0 repeats
//! an element along a broadcast dimension.

use rayon::prelude::*;

/// Element count above which kernels split their work over rayon's thread pool.
pub const PAR_THRESHOLD: usize = 1 << 16;

/// Elements per rayon task for flat elementwise loops.
pub(crate) const PAR_CHUNK: usize = 1 << 14;

/// The numpy broadcast of two shapes, or `None` when they are incompatible.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for (i, o) in out.iter_mut().enumerate() {
        let da = if i + a.len() >= rank {
            a[i + a.len() - rank]
        } else {
            1
        };
        let db = if i + b.len() >= rank {
            b[i + b.len() - rank]
        } else {
            1
        };
        *o = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return None;
        };
    }
    Some(out)
}

/// The row-major strides of a contiguous tensor of `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; shape.len()];
    let mut acc = 1usize;
    for (s, &d) in strides.iter_mut().zip(shape).rev() {
        *s = acc;
        acc = acc.saturating_mul(d);
    }
    strides
}

/// Strides that read a contiguous tensor of `shape` as if it had the (broadcast)
/// shape `out`: right-aligned, 0 along new or size-1 dimensions. `shape` must
/// broadcast to `out`.
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let own = contiguous_strides(shape);
    let lead = out.len() - shape.len();
    (0..out.len())
        .map(|i| {
            if i < lead || shape[i - lead] == 1 {
                0
            } else {
                own[i - lead]
            }
        })
        .collect()
}

/// Merges adjacent dimensions that every operand walks contiguously, and drops size-1
/// dimensions, so loops run over as few, as long, dimensions as possible.
///
/// Returns the collapsed shape and, per dimension, the stride of each of the `N`
/// operands. An empty result means a single element.
pub fn collapse_dims<const N: usize>(
    shape: &[usize],
    strides: [&[usize]; N],
) -> (Vec<usize>, Vec<[usize; N]>) {
    let mut out_shape: Vec<usize> = Vec::with_capacity(shape.len());
    let mut out_strides: Vec<[usize; N]> = Vec::with_capacity(shape.len());
    for (d, &size) in shape.iter().enumerate() {
        if size == 1 {
            continue;
        }
        let st: [usize; N] = std::array::from_fn(|k| strides[k][d]);
        if let (Some(last_size), Some(last_st)) = (out_shape.last_mut(), out_strides.last_mut()) {
            if (0..N).all(|k| last_st[k] == st[k] * size) {
                *last_size *= size;
                *last_st = st;
                continue;
            }
        }
        out_shape.push(size);
        out_strides.push(st);
    }
    (out_shape, out_strides)
}

/// Walks the offsets of `N` operands over a multi-dimensional index space in row-major
/// order (the last dimension fastest).
#[derive(Clone, Debug)]
pub struct Odometer<const N: usize> {
    shape: Vec<usize>,
    strides: Vec<[usize; N]>,
    index: Vec<usize>,
    /// The current offset of each operand.
    pub offsets: [usize; N],
}

impl<const N: usize> Odometer<N> {
    /// An odometer positioned at linear position `start` of `shape`, with operand
    /// offsets `base` at position 0.
    pub fn new(shape: &[usize], strides: &[[usize; N]], base: [usize; N], start: usize) -> Self {
        let mut index = vec![0; shape.len()];
        let mut offsets = base;
        let mut rest = start;
        for d in (0..shape.len()).rev() {
            let size = shape[d].max(1);
            index[d] = rest % size;
            rest /= size;
            for (o, s) in offsets.iter_mut().zip(strides[d]) {
                *o += index[d] * s;
            }
        }
        Odometer {
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            index,
            offsets,
        }
    }

    /// Moves to the next position (wrapping to the start after the last).
    #[inline]
    pub fn advance(&mut self) {
        for d in (0..self.shape.len()).rev() {
            self.index[d] += 1;
            let st = self.strides[d];
            if self.index[d] < self.shape[d] {
                for (o, s) in self.offsets.iter_mut().zip(st) {
                    *o += s;
                }
                return;
            }
            for (o, s) in self.offsets.iter_mut().zip(st) {
                *o -= s * (self.shape[d] - 1);
            }
            self.index[d] = 0;
        }
    }
}

/// Splits a collapsed shape into `(outer shape, outer strides, inner length, inner strides)`.
fn split_inner<const N: usize>(
    shape: Vec<usize>,
    mut strides: Vec<[usize; N]>,
) -> (Vec<usize>, Vec<[usize; N]>, usize, [usize; N]) {
    let mut shape = shape;
    match (shape.pop(), strides.pop()) {
        (Some(inner), Some(st)) => (shape, strides, inner, st),
        _ => (shape, strides, 1, [0; N]),
    }
}

/// Copies the strided view (`shape`, `strides`, starting at `offset`) of `src` into a new
/// contiguous vector. Strides are in elements and may be 0.
pub fn strided_collect<T: Copy + Default + Send + Sync + 'static>(
    src: &[T],
    offset: usize,
    shape: &[usize],
    strides: &[usize],
) -> Vec<T> {
    let n: usize = shape.iter().product();
    if n == 0 {
        return vec![T::default(); n];
    }
    // Every row is copied below.
    let mut out = crate::cpu::pool::buffer::<T>(n);
    let (cshape, cstrides) = collapse_dims(shape, [strides]);
    let (outer, outer_st, inner, [ist]) = split_inner(cshape, cstrides);
    let fill = |rows: &mut [T], start_row: usize| {
        let mut odo = Odometer::new(&outer, &outer_st, [offset], start_row);
        for row in rows.chunks_mut(inner) {
            let base = odo.offsets[0];
            if ist == 1 {
                row.copy_from_slice(&src[base..base + inner]);
            } else {
                for (i, o) in row.iter_mut().enumerate() {
                    *o = src[base + i * ist];
                }
            }
            odo.advance();
        }
    };
    run_rows(&mut out, inner, fill);
    out
}

/// Runs `fill(rows, first_row)` over `out` split into rows of `inner` elements, in
/// parallel chunks of whole rows when `out` is large.
pub fn run_rows<T: Send>(out: &mut [T], inner: usize, fill: impl Fn(&mut [T], usize) + Sync) {
    if out.is_empty() || inner == 0 {
        return;
    }
    if out.len() < PAR_THRESHOLD {
        fill(out, 0);
        return;
    }
    let rows_per_chunk = (PAR_CHUNK / inner).max(1);
    out.par_chunks_mut(rows_per_chunk * inner)
        .enumerate()
        .for_each(|(c, chunk)| fill(chunk, c * rows_per_chunk));
}

/// Applies `f` to every element, in parallel for large inputs.
pub fn map_slice<A: Copy + Sync, O: Copy + Default + Send + 'static>(
    src: &[A],
    f: impl Fn(A) -> O + Sync,
) -> Vec<O> {
    // Every element is written by `body`.
    let mut out = crate::cpu::pool::buffer::<O>(src.len());
    let body = |(o, s): (&mut [O], &[A])| {
        for (o, &s) in o.iter_mut().zip(s) {
            *o = f(s);
        }
    };
    if src.len() < PAR_THRESHOLD {
        body((&mut out, src));
    } else {
        out.par_chunks_mut(PAR_CHUNK)
            .zip(src.par_chunks(PAR_CHUNK))
            .for_each(body);
    }
    out
}

/// Applies `f` elementwise to `a` (of `a_shape`) and `b` (of `b_shape`) broadcast to
/// `out_shape`, which must be their broadcast shape.
///
/// Same-shape and single-element operands take flat loops the compiler vectorises;
/// other shapes walk the collapsed broadcast strides row by row.
pub fn broadcast_zip<A, B, O>(
    a: &[A],
    a_shape: &[usize],
    b: &[B],
    b_shape: &[usize],
    out_shape: &[usize],
    f: impl Fn(A, B) -> O + Sync,
) -> Vec<O>
where
    A: Copy + Sync,
    B: Copy + Sync,
    O: Copy + Default + Send + 'static,
{
    let n: usize = out_shape.iter().product();
    if n == 0 {
        return Vec::new();
    }
    // Every element of the outputs below is written.
    if a.len() == n && b.len() == n {
        let mut out = crate::cpu::pool::buffer::<O>(n);
        let body = |(o, (x, y)): (&mut [O], (&[A], &[B]))| {
            for (o, (&x, &y)) in o.iter_mut().zip(x.iter().zip(y)) {
                *o = f(x, y);
            }
        };
        if n < PAR_THRESHOLD {
            body((&mut out, (a, b)));
        } else {
            out.par_chunks_mut(PAR_CHUNK)
                .zip(a.par_chunks(PAR_CHUNK).zip(b.par_chunks(PAR_CHUNK)))
                .for_each(body);
        }
        return out;
    }
    if b.len() == 1 && a.len() == n {
        let y = b[0];
        return map_slice(a, |x| f(x, y));
    }
    if a.len() == 1 && b.len() == n {
        let x = a[0];
        return map_slice(b, |y| f(x, y));
    }
    let sa = broadcast_strides(a_shape, out_shape);
    let sb = broadcast_strides(b_shape, out_shape);
    let (cshape, cstrides) = collapse_dims(out_shape, [&sa, &sb]);
    let (outer, outer_st, inner, [ia, ib]) = split_inner(cshape, cstrides);
    let mut out = crate::cpu::pool::buffer::<O>(n);
    run_rows(&mut out, inner, |rows, start| {
        let mut odo = Odometer::new(&outer, &outer_st, [0, 0], start);
        for row in rows.chunks_mut(inner) {
            let [oa, ob] = odo.offsets;
            match (ia, ib) {
                (1, 1) => {
                    for (o, (&x, &y)) in row
                        .iter_mut()
                        .zip(a[oa..oa + inner].iter().zip(&b[ob..ob + inner]))
                    {
                        *o = f(x, y);
                    }
                }
                (1, 0) => {
                    let y = b[ob];
                    for (o, &x) in row.iter_mut().zip(&a[oa..oa + inner]) {
                        *o = f(x, y);
                    }
                }
                (0, 1) => {
                    let x = a[oa];
                    for (o, &y) in row.iter_mut().zip(&b[ob..ob + inner]) {
                        *o = f(x, y);
                    }
                }
                _ => {
                    for (i, o) in row.iter_mut().enumerate() {
                        *o = f(a[oa + i * ia], b[ob + i * ib]);
                    }
                }
            }
            odo.advance();
        }
    });
    out
}

/// Applies `f` elementwise to three operands broadcast to `out_shape` (their broadcast
/// shape), as `where` needs.
#[allow(clippy::too_many_arguments)]
pub fn broadcast_zip3<A, B, C, O>(
    a: &[A],
    a_shape: &[usize],
    b: &[B],
    b_shape: &[usize],
    c: &[C],
    c_shape: &[usize],
    out_shape: &[usize],
    f: impl Fn(A, B, C) -> O + Sync,
) -> Vec<O>
where
    A: Copy + Sync,
    B: Copy + Sync,
    C: Copy + Sync,
    O: Copy + Default + Send,
{
    let n: usize = out_shape.iter().product();
    if n == 0 {
        return Vec::new();
    }
    let sa = broadcast_strides(a_shape, out_shape);
    let sb = broadcast_strides(b_shape, out_shape);
    let sc = broadcast_strides(c_shape, out_shape);
    let (cshape, cstrides) = collapse_dims(out_shape, [&sa, &sb, &sc]);
    let (outer, outer_st, inner, [ia, ib, ic]) = split_inner(cshape, cstrides);
    let mut out = vec![O::default(); n];
    run_rows(&mut out, inner, |rows, start| {
        let mut odo = Odometer::new(&outer, &outer_st, [0, 0, 0], start);
        for row in rows.chunks_mut(inner) {
            let [oa, ob, oc] = odo.offsets;
            for (i, o) in row.iter_mut().enumerate() {
                *o = f(a[oa + i * ia], b[ob + i * ib], c[oc + i * ic]);
            }
            odo.advance();
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_broadcast_like_numpy() {
        assert_eq!(broadcast_shapes(&[2, 1, 3], &[4, 1]), Some(vec![2, 4, 3]));
        assert_eq!(broadcast_shapes(&[], &[3]), Some(vec![3]));
        assert_eq!(broadcast_shapes(&[0], &[1]), Some(vec![0]));
        assert_eq!(broadcast_shapes(&[2], &[3]), None);
    }

    #[test]
    fn collapse_merges_contiguous_dims() {
        let s = contiguous_strides(&[2, 3, 4]);
        let (shape, st) = collapse_dims(&[2, 3, 4], [&s]);
        assert_eq!(shape, vec![24]);
        assert_eq!(st, vec![[1]]);
    }

    #[test]
    fn strided_collect_transposes() {
        let src = [0, 1, 2, 3, 4, 5];
        // [2, 3] read as its transpose [3, 2].
        assert_eq!(
            strided_collect(&src, 0, &[3, 2], &[1, 3]),
            vec![0, 3, 1, 4, 2, 5]
        );
    }

    #[test]
    fn zip_broadcasts_rows_and_columns() {
        let a = [1, 2, 3];
        let b = [10, 20];
        let out = broadcast_zip(&a, &[1, 3], &b, &[2, 1], &[2, 3], |x, y| x + y);
        assert_eq!(out, vec![11, 12, 13, 21, 22, 23]);
    }
}

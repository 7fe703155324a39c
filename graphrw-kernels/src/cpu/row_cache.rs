//! [`RowCache`]: a tensor that grows along one axis into spare capacity, as a
//! generation loop's key/value cache grows by the new tokens each step.

use crate::macros::dispatch;
use crate::tensor::checked_numel;
use crate::{KernelError, Storage, Tensor};

/// The fewest rows a [`RowCache`] holds (a short prompt's cache is not regrown at once).
pub const MIN_ROWS: usize = 16;

/// The capacity for `rows` rows: the next power of two, at least [`MIN_ROWS`]. A
/// function of the length alone, so two caches of one length (the keys and the values
/// of a layer) always have one capacity.
pub fn capacity_for(rows: usize) -> usize {
    rows.max(MIN_ROWS).next_power_of_two()
}

/// A tensor of shape `[outer.., len, inner..]` (`len` on the cache's `axis`) held in a
/// buffer of `[outer.., capacity, inner..]`: the spare rows sit at the end of each
/// outer block, so appending `n` rows writes only those rows, and the capacity doubles
/// when it runs out (amortised O(n) an append).
///
/// The buffer is a [`Tensor`] whose storage nothing else holds while it is written; a
/// reader (the fused attention's [`sdpa_prefix`](crate::fused::sdpa_prefix) on the
/// buffer and [`RowCache::len`]) clones it, and an append that finds it shared copies
/// it first, so no reader ever sees its rows change.
///
/// ```
/// use graphrw_kernels::cpu::RowCache;
/// use graphrw_kernels::Tensor;
///
/// // [heads 2, len 1, dim 2], grown along axis 1.
/// let first = Tensor::from_vec(vec![2, 1, 2], vec![1.0f32, 2.0, 3.0, 4.0])?;
/// let mut cache = RowCache::new(&first, 1)?;
/// cache.append(&Tensor::from_vec(vec![2, 1, 2], vec![5.0f32, 6.0, 7.0, 8.0])?)?;
/// assert_eq!(cache.len(), 2);
/// assert_eq!(cache.buffer().shape(), &[2, 16, 2]);
/// let t = cache.to_tensor()?;
/// assert_eq!(t.as_slice::<f32>()?, &[1.0, 2.0, 5.0, 6.0, 3.0, 4.0, 7.0, 8.0]);
/// # Ok::<(), graphrw_kernels::KernelError>(())
/// ```
#[derive(Clone, Debug)]
pub struct RowCache {
    buffer: Tensor,
    axis: usize,
    len: usize,
}

impl RowCache {
    /// A cache holding `initial`, growing along `axis`, with the capacity
    /// [`capacity_for`] its length.
    pub fn new(initial: &Tensor, axis: usize) -> Result<RowCache, KernelError> {
        if axis >= initial.rank() {
            return Err(KernelError::shape(
                "row_cache",
                format!("axis {axis} of a rank-{} tensor", initial.rank()),
            ));
        }
        let len = initial.shape()[axis];
        let buffer = regrow(initial, axis, len, capacity_for(len))?;
        Ok(RowCache { buffer, axis, len })
    }

    /// Rows in use along the axis.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no rows are in use.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Rows the buffer holds along the axis.
    pub fn capacity(&self) -> usize {
        self.buffer.shape()[self.axis]
    }

    /// The axis the cache grows along.
    pub fn axis(&self) -> usize {
        self.axis
    }

    /// The buffer, `[outer.., capacity, inner..]`: its first [`RowCache::len`] rows of
    /// each outer block are the cache.
    pub fn buffer(&self) -> &Tensor {
        &self.buffer
    }

    /// The shape of the cache: the buffer's, with the axis at [`RowCache::len`].
    pub fn shape(&self) -> Vec<usize> {
        let mut shape = self.buffer.shape().to_vec();
        shape[self.axis] = self.len;
        shape
    }

    /// The first `rows` rows of each block as a compact tensor (a copy).
    pub fn prefix(&self, rows: usize) -> Result<Tensor, KernelError> {
        if rows > self.len {
            return Err(KernelError::shape(
                "row_cache",
                format!("{rows} rows of a cache of {}", self.len),
            ));
        }
        regrow(&self.buffer, self.axis, rows, rows)
    }

    /// The cache as a compact tensor (a copy).
    pub fn to_tensor(&self) -> Result<Tensor, KernelError> {
        regrow(&self.buffer, self.axis, self.len, self.len)
    }

    /// Appends `new` (the cache's shape but for the axis) after the rows in use:
    /// written in place when the buffer has room and nothing else holds it, else into
    /// a new buffer of [`capacity_for`] the new length.
    pub fn append(&mut self, new: &Tensor) -> Result<(), KernelError> {
        let op = "row_cache";
        let (shape, a) = (self.buffer.shape().to_vec(), self.axis);
        let fits = new.rank() == shape.len()
            && new.shape()[..a] == shape[..a]
            && new.shape()[a + 1..] == shape[a + 1..];
        if !fits || new.dtype() != self.buffer.dtype() {
            return Err(KernelError::shape(
                op,
                format!(
                    "appending {} {:?} along axis {a} to a {} cache of {:?}",
                    new.dtype(),
                    new.shape(),
                    self.buffer.dtype(),
                    self.shape()
                ),
            ));
        }
        let n = new.shape()[a];
        let total = self
            .len
            .checked_add(n)
            .ok_or_else(|| KernelError::shape(op, format!("{} + {n} rows overflow", self.len)))?;
        if total > self.capacity() || self.buffer.unique_storage_mut().is_none() {
            self.buffer = regrow(&self.buffer, a, self.len, capacity_for(total))?;
        }
        let inner: usize = shape[a + 1..].iter().product();
        let (cap, len, block) = (self.capacity(), self.len, n * inner);
        let Some(storage) = self.buffer.unique_storage_mut() else {
            return Err(KernelError::invalid(op, "a new buffer is shared"));
        };
        macro_rules! write_rows {
            ($($variant:ident),*) => {
                match storage {
                    $(Storage::$variant(dst) => {
                        let src = new.as_slice()?;
                        if block > 0 {
                            for (b, rows) in src.chunks_exact(block).enumerate() {
                                let at = (b * cap + len) * inner;
                                dst[at..at + block].copy_from_slice(rows);
                            }
                        }
                    })*
                    Storage::Mapped(_) | Storage::External(_) => {
                        return Err(KernelError::invalid(op, "a new buffer is mapped"))
                    }
                }
            };
        }
        write_rows!(F32, F64, F16, BF16, I64, I32, Bool, U8, I8, I16, U16, U32, U64);
        self.len = total;
        Ok(())
    }
}

/// `src`'s first `rows` rows of each outer block (along `axis`) in a new buffer of
/// `cap` rows a block, the spare rows zero.
fn regrow(src: &Tensor, axis: usize, rows: usize, cap: usize) -> Result<Tensor, KernelError> {
    let shape = src.shape();
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let have = shape[axis];
    let mut out_shape = shape.to_vec();
    out_shape[axis] = cap;
    checked_numel("row_cache", &out_shape)?;
    dispatch!(src.dtype(), |T| {
        let data = src.slice_of::<T>();
        let mut out = vec![T::default(); outer * cap * inner];
        if inner > 0 {
            for b in 0..outer {
                let from = &data[b * have * inner..(b * have + rows) * inner];
                out[b * cap * inner..(b * cap + rows) * inner].copy_from_slice(from);
            }
        }
        Ok(Tensor::from_data(out_shape, out))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    /// `[2, rows, 3]` with element `(b, r, c)` = `100 b + 10 (first + r) + c`.
    fn rows(first: usize, n: usize) -> Tensor {
        let mut v = Vec::new();
        for b in 0..2 {
            for r in 0..n {
                for c in 0..3 {
                    v.push((100 * b + 10 * (first + r) + c) as f32);
                }
            }
        }
        Tensor::from_vec(vec![2, n, 3], v).unwrap()
    }

    fn assert_same(got: &Tensor, want: &Tensor) {
        assert_eq!(got.shape(), want.shape());
        assert_eq!(got.to_f64_vec(), want.to_f64_vec());
    }

    #[test]
    fn appends_match_a_concatenation_across_growth() {
        let mut cache = RowCache::new(&rows(0, 0), 1).unwrap();
        assert_eq!(cache.capacity(), MIN_ROWS);
        let mut len = 0;
        for (step, n) in [5usize, 1, 1, 9, 1, 0, 20, 3].into_iter().enumerate() {
            cache.append(&rows(len, n)).unwrap();
            len += n;
            assert_eq!(cache.len(), len, "step {step}");
            assert_eq!(cache.capacity(), capacity_for(len), "step {step}");
            assert_eq!(cache.shape(), vec![2, len, 3]);
            assert_same(&cache.to_tensor().unwrap(), &rows(0, len));
        }
        assert_same(&cache.prefix(7).unwrap(), &rows(0, 7));
        assert!(cache.prefix(len + 1).is_err());
    }

    #[test]
    fn an_append_with_room_writes_in_place_and_a_shared_buffer_is_copied() {
        let mut cache = RowCache::new(&rows(0, 4), 1).unwrap();
        let before = cache.buffer().clone();
        // A reader holds the buffer: the append copies, and the reader's rows stay.
        cache.append(&rows(4, 1)).unwrap();
        assert!(!cache.buffer().shares_storage_with(&before));
        assert_same(&cache.prefix(4).unwrap(), &rows(0, 4));
        drop(before);
        // Nothing else holds it now: the next append writes into the same storage.
        let held = cache.buffer().as_slice::<f32>().unwrap().as_ptr();
        cache.append(&rows(5, 2)).unwrap();
        assert_eq!(cache.buffer().as_slice::<f32>().unwrap().as_ptr(), held);
        assert_same(&cache.to_tensor().unwrap(), &rows(0, 7));
    }

    #[test]
    fn any_axis_and_dtype() {
        // Axis 0 (one block) and the last axis (inner 1), as i64 and bool.
        let t = Tensor::from_vec(vec![2, 2], vec![1i64, 2, 3, 4]).unwrap();
        let mut c0 = RowCache::new(&t, 0).unwrap();
        c0.append(&Tensor::from_vec(vec![1, 2], vec![5i64, 6]).unwrap())
            .unwrap();
        assert_eq!(c0.to_tensor().unwrap().to_i64_vec(), vec![1, 2, 3, 4, 5, 6]);
        let mut c1 = RowCache::new(&t, 1).unwrap();
        c1.append(&Tensor::from_vec(vec![2, 1], vec![7i64, 8]).unwrap())
            .unwrap();
        assert_eq!(c1.to_tensor().unwrap().to_i64_vec(), vec![1, 2, 7, 3, 4, 8]);
        let b = Tensor::from_vec(vec![1, 1], vec![true]).unwrap();
        let mut cb = RowCache::new(&b, 1).unwrap();
        cb.append(&Tensor::from_vec(vec![1, 1], vec![false]).unwrap())
            .unwrap();
        assert_eq!(cb.to_tensor().unwrap().dtype(), DType::Bool);
        assert_eq!(cb.to_tensor().unwrap().to_f64_vec(), vec![1.0, 0.0]);
    }

    #[test]
    fn mismatched_appends_are_errors() {
        let mut cache = RowCache::new(&rows(0, 2), 1).unwrap();
        let wrong_dims = Tensor::zeros(DType::F32, &[2, 1, 4]);
        let err = cache.append(&wrong_dims).unwrap_err().to_string();
        assert!(
            err.contains("[2, 1, 4]") && err.contains("[2, 2, 3]"),
            "{err}"
        );
        let wrong_dtype = Tensor::zeros(DType::F64, &[2, 1, 3]);
        assert!(cache.append(&wrong_dtype).is_err());
        assert!(RowCache::new(&rows(0, 2), 3).is_err());
        assert_eq!(cache.len(), 2);
    }
}

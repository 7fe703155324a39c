//! Key/value caches that grow in place. A decoder step reads its cache as `past_*`
//! inputs and returns `concat(past, new)` as `present_*` outputs; run step after step
//! with the presents fed back, that concatenation copies the whole cache every step.
//!
//! Fed a [`KvCache`] as its `past` input instead of a tensor, the reference executor's
//! `concat` appends the new rows to the cache's buffer (the spare capacity of a
//! [`RowCache`]; amortised O(new rows)) and returns another `KvCache` over the longer
//! cache; the fused attention reads the keys and values in place from the buffer
//! ([`fused::sdpa_prefix`]); any other kernel sees it as a tensor (a copy). The
//! [`DecodeLoop`](super::DecodeLoop) runs a plan this way.

use std::any::Any;
use std::sync::{Arc, Mutex, MutexGuard};

use graphrw_kernels::cpu::RowCache;
use graphrw_kernels::{DType, Tensor};

use super::executor::KernelFailure;
use super::value::{DeviceValue, RunValue};
use crate::meta::Device;

/// A key/value cache as the interpreter holds it: the rows one step sees of a
/// [`RowCache`] that the steps of a loop share. Appending to the newest value writes
/// into the shared buffer; appending to an older one (a fork: two continuations of
/// one prefix) copies its rows into a cache of its own first, so no value ever sees
/// its rows change.
#[derive(Clone, Debug)]
pub struct KvCache {
    cache: Arc<Mutex<RowCache>>,
    /// The axis the cache grows along.
    axis: usize,
    /// Rows along the cache's axis this value sees (the cache's first `len`).
    len: usize,
    shape: Vec<usize>,
    dtype: DType,
}

impl KvCache {
    /// A cache holding `initial`, growing along `axis`.
    pub fn new(initial: &Tensor, axis: usize) -> Result<KvCache, KernelFailure> {
        Ok(KvCache::over(RowCache::new(initial, axis)?))
    }

    fn over(cache: RowCache) -> KvCache {
        KvCache {
            axis: cache.axis(),
            len: cache.len(),
            shape: cache.shape(),
            dtype: cache.buffer().dtype(),
            cache: Arc::new(Mutex::new(cache)),
        }
    }

    fn lock(&self) -> Result<MutexGuard<'_, RowCache>, KernelFailure> {
        self.cache
            .lock()
            .map_err(|_| "a key/value cache's lock was poisoned by a panic".into())
    }

    /// The axis the cache grows along.
    pub fn axis(&self) -> usize {
        self.axis
    }

    /// Rows this value sees along the axis.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the value sees no rows.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Rows the shared buffer holds along the axis.
    pub fn capacity(&self) -> usize {
        self.lock().map_or(0, |c| c.capacity())
    }

    /// This value with `new` appended along `axis`: written into the shared buffer when
    /// this is its newest value, else into a copy of this value's rows.
    pub fn append(&self, new: &Tensor, axis: usize) -> Result<KvCache, KernelFailure> {
        if self.axis != axis {
            return Err(format!(
                "a cache growing along axis {} appended to along axis {axis}",
                self.axis
            )
            .into());
        }
        let mut cache = self.lock()?;
        if cache.len() == self.len {
            cache.append(new)?;
            return Ok(KvCache {
                axis,
                cache: Arc::clone(&self.cache),
                len: cache.len(),
                shape: cache.shape(),
                dtype: self.dtype,
            });
        }
        let mut forked = RowCache::new(&cache.prefix(self.len)?, axis)?;
        drop(cache);
        forked.append(new)?;
        Ok(KvCache::over(forked))
    }

    /// The shared buffer (`[.., capacity, ..]`, its first [`KvCache::len`] rows along
    /// the axis this value's), for a kernel to read in place.
    pub fn buffer(&self) -> Result<Tensor, KernelFailure> {
        Ok(self.lock()?.buffer().clone())
    }

    /// This value as a compact tensor (a copy).
    pub fn to_tensor(&self) -> Result<Tensor, KernelFailure> {
        Ok(self.lock()?.prefix(self.len)?)
    }

    /// The cache a run value holds, if it is one.
    pub fn of(value: &RunValue) -> Option<&KvCache> {
        match value {
            RunValue::Device(d) => d.as_any().downcast_ref::<KvCache>(),
            RunValue::Host(_) => None,
        }
    }
}

impl DeviceValue for KvCache {
    fn dtype(&self) -> DType {
        self.dtype
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn nbytes(&self) -> usize {
        self.shape.iter().product::<usize>() * self.dtype.size_in_bytes()
    }

    fn device(&self) -> Device {
        Device::Cpu
    }

    fn to_host(&self) -> Result<Tensor, KernelFailure> {
        self.to_tensor()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// `concat(past, new)` along `dim` where `past` is a [`KvCache`] growing along that
/// axis: the cache with `new` appended, as a run value. `None` when the operands are
/// not of that form (the caller concatenates as usual).
pub(crate) fn append_to_cache(
    operands: &[&RunValue],
    dim: i64,
) -> Option<Result<RunValue, KernelFailure>> {
    let [past, new] = operands else {
        return None;
    };
    let cache = KvCache::of(past)?;
    let rank = cache.shape.len() as i64;
    let axis = if dim < 0 { dim + rank } else { dim };
    if !(0..rank).contains(&axis) || axis as usize != cache.axis() {
        return None;
    }
    let new = match new.to_host() {
        Ok(t) => t,
        Err(e) => return Some(Err(e)),
    };
    Some(
        cache
            .append(&new, axis as usize)
            .map(|c| RunValue::Device(Arc::new(c))),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(first: usize, n: usize) -> Tensor {
        let v: Vec<f32> = (first..first + n).map(|r| r as f32).collect();
        Tensor::from_vec(vec![1, n], v).unwrap()
    }

    fn host(c: &KvCache) -> Vec<f64> {
        c.to_tensor().unwrap().to_f64_vec()
    }

    #[test]
    fn the_newest_value_appends_in_place_and_an_older_one_forks() {
        let a = KvCache::new(&rows(0, 2), 1).unwrap();
        let b = a.append(&rows(2, 1), 1).unwrap();
        assert!(
            Arc::ptr_eq(&a.cache, &b.cache),
            "appended into the shared buffer"
        );
        assert_eq!((a.len(), b.len()), (2, 3));
        // `a` still sees its two rows.
        assert_eq!(host(&a), vec![0.0, 1.0]);
        // Appending to `a` again (a fork) copies its rows: `b` keeps its third row.
        let fork = a.append(&rows(7, 1), 1).unwrap();
        assert!(!Arc::ptr_eq(&a.cache, &fork.cache));
        assert_eq!(host(&fork), vec![0.0, 1.0, 7.0]);
        assert_eq!(host(&b), vec![0.0, 1.0, 2.0]);
        assert_eq!(
            b.capacity(),
            graphrw_kernels::cpu::row_cache::capacity_for(3)
        );
    }

    #[test]
    fn only_a_concat_along_the_caches_axis_appends() {
        let past = RunValue::Device(Arc::new(KvCache::new(&rows(0, 2), 1).unwrap()));
        let new = RunValue::Host(rows(2, 1));
        let appended = append_to_cache(&[&past, &new], -1)
            .expect("along the axis")
            .unwrap();
        assert_eq!(appended.shape(), &[1, 3]);
        assert_eq!(
            appended.to_host().unwrap().to_f64_vec(),
            vec![0.0, 1.0, 2.0]
        );
        assert!(append_to_cache(&[&past, &new], 0).is_none(), "another axis");
        assert!(
            append_to_cache(&[&new, &past], 1).is_none(),
            "the cache second"
        );
        assert!(
            append_to_cache(&[&past, &new, &new], 1).is_none(),
            "three operands"
        );
        let wrong = RunValue::Host(Tensor::zeros(DType::F32, &[2, 1]));
        assert!(append_to_cache(&[&past, &wrong], 1).unwrap().is_err());
    }
}

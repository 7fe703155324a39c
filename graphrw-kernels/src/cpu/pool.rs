//! Output buffers reused across the nodes and runs of a plan.
//!
//! A kernel's output is a fresh `Vec`; for the large ones the allocator maps new pages,
//! which the kernel then faults in and the kernel zeroes (`vec![0; n]`), and freeing
//! them hands the pages back. On a transformer block that was about a fifth of the run
//! time. A [`BufferPool`] keeps the buffers of freed values instead: the interpreter
//! gives back each intermediate tensor after its last use ([`BufferPool::recycle`]),
//! and while it runs a node with the pool installed on its thread
//! ([`BufferPool::install`]) the kernels draw their outputs from it ([`buffer`]), so a
//! plan run a second time allocates (and touches) no new pages for them.
//!
//! Safety of the reuse: a tensor's storage is taken back only when no other tensor
//! shares it (the `Arc` is unique), and a reused buffer holds initialised values of its
//! type (the stale elements of the freed tensor); [`buffer`]'s callers overwrite every
//! element. No uninitialised memory is reachable.

use std::any::{Any, TypeId};
use std::cell::RefCell;
use std::sync::{Arc, Mutex};

use half::{bf16, f16};

use crate::{Element, Storage, Tensor};

/// Buffers smaller than this are left to the allocator (its small-size bins are fast
/// and never return pages to the system).
pub const MIN_POOLED_BYTES: usize = 64 * 1024;

/// A reused buffer may be at most this many times larger than the request.
const MAX_WASTE: usize = 4;

/// One free buffer: a `Vec<T>` behind `Any`, with its element type and capacity.
struct Free {
    ty: TypeId,
    bytes: usize,
    elems: usize,
    buf: Box<dyn Any + Send>,
}

#[derive(Default)]
struct Inner {
    free: Vec<Free>,
    bytes: usize,
    limit: usize,
    reused_bytes: usize,
}

/// Free buffers of one plan, bounded by a byte limit (see [`BufferPool::raise_limit`]).
#[derive(Default)]
pub struct BufferPool {
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (n, bytes) = self.lock(|i| (i.free.len(), i.bytes));
        write!(f, "BufferPool({n} buffers, {bytes} bytes)")
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<BufferPool>>> = const { RefCell::new(None) };
}

/// Restores the thread's previous pool when dropped (also on unwinding).
#[must_use = "the pool is installed only while the guard lives"]
pub struct PoolGuard {
    previous: Option<Arc<BufferPool>>,
}

impl Drop for PoolGuard {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// A storage's vector as `Any` (float and integer dtypes; mapped, external and bool
/// storage are not pooled).
fn into_any(storage: Storage) -> Option<(TypeId, usize, usize, Box<dyn Any + Send>)> {
    fn boxed<T: Element>(v: Vec<T>) -> Option<(TypeId, usize, usize, Box<dyn Any + Send>)> {
        let elems = v.capacity();
        Some((
            TypeId::of::<Vec<T>>(),
            elems * std::mem::size_of::<T>(),
            elems,
            Box::new(v),
        ))
    }
    match storage {
        Storage::F32(v) => boxed::<f32>(v),
        Storage::F64(v) => boxed::<f64>(v),
        Storage::F16(v) => boxed::<f16>(v),
        Storage::BF16(v) => boxed::<bf16>(v),
        Storage::I64(v) => boxed::<i64>(v),
        Storage::I32(v) => boxed::<i32>(v),
        Storage::U8(v) => boxed::<u8>(v),
        Storage::I8(v) => boxed::<i8>(v),
        Storage::I16(v) => boxed::<i16>(v),
        Storage::U16(v) => boxed::<u16>(v),
        Storage::U32(v) => boxed::<u32>(v),
        Storage::U64(v) => boxed::<u64>(v),
        Storage::Bool(_) | Storage::Mapped(_) | Storage::External(_) => None,
    }
}

impl BufferPool {
    /// An empty pool with a zero limit (it keeps nothing until the limit is raised).
    pub fn new() -> BufferPool {
        BufferPool::default()
    }

    fn lock<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        // A poisoned lock only means a panic elsewhere while it was held; the free list
        // is still a valid list of buffers.
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut guard)
    }

    /// Installs this pool on the current thread until the guard is dropped: [`buffer`]
    /// called on this thread draws from it.
    pub fn install(self: &Arc<Self>) -> PoolGuard {
        let previous = CURRENT.with(|c| c.borrow_mut().replace(Arc::clone(self)));
        PoolGuard { previous }
    }

    /// Lets the pool hold up to `bytes` (it never lowers the limit). The interpreter
    /// passes twice the peak live bytes of the runs so far, so the pool never holds
    /// more than two runs' worth of what one had alive at once.
    pub fn raise_limit(&self, bytes: usize) {
        self.lock(|i| i.limit = i.limit.max(bytes));
    }

    /// Takes back `t`'s buffer when no other tensor shares it and it is large enough
    /// to pool; the oldest buffers are dropped to stay within the limit.
    pub fn recycle(&self, t: Tensor) {
        if t.nbytes() < MIN_POOLED_BYTES {
            return;
        }
        let Some(storage) = t.into_unique_storage() else {
            return;
        };
        let Some((ty, bytes, elems, buf)) = into_any(storage) else {
            return;
        };
        self.lock(|i| {
            if bytes > i.limit {
                return;
            }
            while i.bytes + bytes > i.limit && !i.free.is_empty() {
                let old = i.free.remove(0);
                i.bytes -= old.bytes;
            }
            i.bytes += bytes;
            i.free.push(Free {
                ty,
                bytes,
                elems,
                buf,
            });
        });
    }

    /// The bytes held now.
    pub fn held_bytes(&self) -> usize {
        self.lock(|i| i.bytes)
    }

    /// The bytes of outputs served from reused buffers since the pool was made.
    pub fn reused_bytes(&self) -> usize {
        self.lock(|i| i.reused_bytes)
    }

    /// The smallest free `Vec<T>` holding at least `n` elements (and not much more).
    fn take<T: 'static>(&self, n: usize) -> Option<Vec<T>> {
        let ty = TypeId::of::<Vec<T>>();
        let buf = self.lock(|i| {
            let best = i
                .free
                .iter()
                .enumerate()
                .filter(|(_, f)| f.ty == ty && f.elems >= n && f.elems <= n * MAX_WASTE)
                .min_by_key(|(_, f)| f.elems)
                .map(|(at, _)| at)?;
            let f = i.free.swap_remove(best);
            i.bytes -= f.bytes;
            i.reused_bytes += n * std::mem::size_of::<T>();
            Some(f.buf)
        })?;
        buf.downcast::<Vec<T>>().ok().map(|b| *b)
    }
}

/// A vector of `n` elements for a kernel's output, whose every element the caller
/// overwrites: from the pool installed on this thread when it has a fitting buffer
/// (holding the stale values of a freed tensor), else freshly allocated zeros.
pub fn buffer<T: Copy + Default + 'static>(n: usize) -> Vec<T> {
    if n * std::mem::size_of::<T>() >= MIN_POOLED_BYTES {
        let pooled = CURRENT.with(|c| c.borrow().as_ref().and_then(|p| p.take::<T>(n)));
        if let Some(mut v) = pooled {
            if v.len() >= n {
                v.truncate(n);
            } else {
                v.resize(n, T::default());
            }
            return v;
        }
    }
    vec![T::default(); n]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn big(n: usize, x: f32) -> Tensor {
        Tensor::from_vec(vec![n], vec![x; n]).expect("shape fits")
    }

    const N: usize = 1 << 16; // 256 KiB of f32

    #[test]
    fn no_pool_gives_zeros() {
        assert!(buffer::<f32>(N).iter().all(|&x| x == 0.0));
        assert_eq!(buffer::<f32>(3), vec![0.0; 3]);
    }

    #[test]
    fn recycled_buffer_is_reused_with_the_requested_length() {
        let pool = Arc::new(BufferPool::new());
        pool.raise_limit(1 << 30);
        let t = big(N, 7.0);
        let ptr = t.as_slice::<f32>().expect("f32").as_ptr();
        pool.recycle(t);
        assert_eq!(pool.held_bytes(), N * 4);
        let _g = pool.install();
        let v = buffer::<f32>(N - 5);
        assert_eq!(v.len(), N - 5);
        assert_eq!(v.as_ptr(), ptr, "the freed buffer is handed out again");
        assert_eq!(pool.held_bytes(), 0);
        assert_eq!(pool.reused_bytes(), (N - 5) * 4);
        // A second request finds nothing and allocates zeros.
        assert!(buffer::<f32>(N).iter().all(|&x| x == 0.0));
    }

    #[test]
    fn shared_storage_is_never_taken() {
        let pool = Arc::new(BufferPool::new());
        pool.raise_limit(1 << 30);
        let t = big(N, 1.0);
        let keep = t.clone();
        pool.recycle(t);
        assert_eq!(pool.held_bytes(), 0);
        assert!(keep
            .as_slice::<f32>()
            .expect("f32")
            .iter()
            .all(|&x| x == 1.0));
    }

    #[test]
    fn wrong_type_too_small_or_too_large_buffers_are_not_used() {
        let pool = Arc::new(BufferPool::new());
        pool.raise_limit(1 << 30);
        pool.recycle(big(N, 1.0));
        let _g = pool.install();
        assert!(
            buffer::<f64>(N).iter().all(|&x| x == 0.0),
            "f64 wants its own"
        );
        assert!(buffer::<f32>(N + 1).iter().all(|&x| x == 0.0), "too small");
        assert!(
            buffer::<f32>(N / (MAX_WASTE * 2)).iter().all(|&x| x == 0.0),
            "too wasteful"
        );
        assert_eq!(pool.held_bytes(), N * 4, "still there");
    }

    #[test]
    fn limit_drops_the_oldest_and_small_tensors_are_left_alone() {
        let pool = Arc::new(BufferPool::new());
        pool.recycle(big(N, 1.0));
        assert_eq!(pool.held_bytes(), 0, "a zero limit keeps nothing");
        pool.raise_limit(N * 4 * 2);
        pool.recycle(big(N, 1.0));
        pool.recycle(big(N, 2.0));
        pool.recycle(big(N, 3.0));
        assert_eq!(pool.held_bytes(), N * 4 * 2);
        pool.recycle(big(8, 1.0));
        assert_eq!(pool.held_bytes(), N * 4 * 2);
    }

    #[test]
    fn guard_restores_the_previous_pool() {
        let outer = Arc::new(BufferPool::new());
        outer.raise_limit(1 << 30);
        outer.recycle(big(N, 1.0));
        let _a = outer.install();
        {
            let inner = Arc::new(BufferPool::new());
            let _b = inner.install();
            assert!(buffer::<f32>(N).iter().all(|&x| x == 0.0));
            assert_eq!(outer.held_bytes(), N * 4, "the inner pool was asked");
        }
        assert_eq!(buffer::<f32>(N).len(), N);
        assert_eq!(outer.held_bytes(), 0, "the outer pool is back");
    }
}

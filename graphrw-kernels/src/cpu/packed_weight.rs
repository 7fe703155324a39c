//! A constant weight packed once for the AVX-512 f32 GEMM, for executors that run the
//! same weights many times ([`Epilogue::packed`](super::Epilogue::packed)).
//!
//! A packed weight remembers which tensor it packs by a weak handle on that tensor's
//! storage and the window it views, so a cache of them neither keeps weights alive nor
//! mistakes another tensor for the one packed: while the handle exists, no other
//! storage can take its address.

use std::sync::Weak;

use crate::tensor::Storage;
use crate::{DType, Tensor};

#[cfg(target_arch = "x86_64")]
type Packed = super::sgemm512::PackedB;
/// Columns per packed panel.
#[cfg(target_arch = "x86_64")]
const PANEL: usize = super::sgemm512::NR;
#[cfg(not(target_arch = "x86_64"))]
const PANEL: usize = 32;
/// No packed GEMM off x86-64: [`PackedWeight::new`] gives `None`.
#[cfg(not(target_arch = "x86_64"))]
type Packed = std::convert::Infallible;

/// Columns `columns` of an f32 matrix `[K, N]`, packed for the AVX-512 GEMM.
#[derive(Debug)]
pub struct PackedWeight {
    storage: Weak<Storage>,
    offset: usize,
    shape: Vec<usize>,
    columns: (usize, usize),
    pub(crate) packed: Packed,
}

impl PackedWeight {
    /// Products of fewer rows run on the `gemm` crate even with a packed weight (and
    /// executors need not pack for them): measured on a 2-core Zen 4, the packed GEMM
    /// is 10-40% faster from 64 rows up at 2 threads and level on one, but 10-40%
    /// slower at 16 rows, where its 12-row tiles waste a third of their work.
    pub const MIN_ROWS: usize = 64;

    /// Packs columns `columns` (all when `None`) of `b`, an f32 matrix `[K, N]`. `None`
    /// where the packed GEMM does not run or does not win: a CPU without AVX-512F, off
    /// x86-64, another dtype or rank, a column range outside `b`, no elements, or a
    /// product deeper than eight times its width (measured slower than the `gemm`
    /// crate: 0.98x at 32 times, 0.88x at 64 times).
    pub fn new(b: &Tensor, columns: Option<(usize, usize)>) -> Option<PackedWeight> {
        let &[k, n_all] = b.shape() else {
            return None;
        };
        let (start, end) = columns.unwrap_or((0, n_all));
        let n = end.checked_sub(start)?;
        if b.dtype() != DType::F32 || end > n_all || k == 0 || n == 0 || k > 8 * n {
            return None;
        }
        let packed = pack(b, k, n, n_all, start)?;
        Some(PackedWeight {
            storage: b.storage_handle(),
            offset: b.storage_offset(),
            shape: b.shape().to_vec(),
            columns: (start, end),
            packed,
        })
    }

    /// Bytes [`PackedWeight::new`] would hold for `n` columns of depth `k` (panels of
    /// 32 columns, the last zero-padded), to check a budget before packing.
    pub fn size_for(k: usize, n: usize) -> usize {
        n.div_ceil(PANEL) * PANEL * k * std::mem::size_of::<f32>()
    }

    /// True when this packs columns `columns` (all when `None`) of `b` itself: the same
    /// storage viewed through the same window.
    pub fn packs(&self, b: &Tensor, columns: Option<(usize, usize)>) -> bool {
        let all = (0, self.shape.get(1).copied().unwrap_or(0));
        std::ptr::eq(self.storage.as_ptr(), b.storage_ptr())
            && self.offset == b.storage_offset()
            && self.shape == b.shape()
            && self.columns == columns.unwrap_or(all)
    }

    /// True when the tensor it was packed from is gone (a cache may drop it).
    pub fn is_orphan(&self) -> bool {
        self.storage.strong_count() == 0
    }

    /// Bytes the packed copy holds.
    pub fn nbytes(&self) -> usize {
        #[cfg(target_arch = "x86_64")]
        {
            self.packed.nbytes()
        }
        #[cfg(not(target_arch = "x86_64"))]
        match self.packed {}
    }
}

#[cfg(target_arch = "x86_64")]
fn pack(b: &Tensor, k: usize, n: usize, ldb: usize, col0: usize) -> Option<Packed> {
    if !super::sgemm512::available() {
        return None;
    }
    let data = b.acc_cow::<f32>();
    Some(super::sgemm512::PackedB::pack(&data, k, n, ldb, col0))
}

#[cfg(not(target_arch = "x86_64"))]
fn pack(_: &Tensor, _: usize, _: usize, _: usize, _: usize) -> Option<Packed> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix(k: usize, n: usize, seed: usize) -> Tensor {
        let data = (0..k * n)
            .map(|i| ((i * 7919 + seed) % 101) as f32 / 50.0 - 1.0)
            .collect();
        Tensor::from_vec(vec![k, n], data).expect("tensor")
    }

    /// Whether this CPU runs the packed GEMM (x86-64 with AVX-512).
    fn packs_here() -> bool {
        crate::cpu::Isa::Avx512.is_available()
    }

    #[test]
    fn packs_only_its_own_tensor_and_columns() {
        let b = matrix(64, 96, 1);
        let packed = PackedWeight::new(&b, Some((32, 96)));
        if !packs_here() {
            // No AVX-512F (or not x86-64): nothing is packed, anywhere.
            assert!(packed.is_none(), "packed without the packed GEMM");
            println!("SKIPPED: packing a weight needs x86-64 with AVX-512F");
            return;
        }
        let w = packed.expect("a weight the packed GEMM runs");
        assert!(w.packs(&b, Some((32, 96))));
        assert!(
            w.packs(&b.clone(), Some((32, 96))),
            "a clone shares the storage"
        );
        assert!(!w.packs(&b, None), "other columns");
        assert!(!w.packs(&b, Some((0, 64))), "other columns");
        let same_values = matrix(64, 96, 1);
        assert!(!w.packs(&same_values, Some((32, 96))), "another tensor");
        assert!(!w.is_orphan());
        assert_eq!(w.nbytes(), 64 * 64 * 4);
        assert_eq!(w.nbytes(), PackedWeight::size_for(64, 64));
        drop(b);
        assert!(w.is_orphan(), "the weight was dropped");
    }

    #[test]
    fn refuses_what_the_packed_gemm_does_not_run() {
        let b = matrix(64, 96, 2);
        assert!(
            PackedWeight::new(&b, Some((0, 97))).is_none(),
            "columns outside"
        );
        assert!(
            PackedWeight::new(&b, Some((10, 10))).is_none(),
            "no columns"
        );
        assert!(
            PackedWeight::new(&matrix(800, 90, 3), None).is_none(),
            "deeper than 8n"
        );
        // As deep as 8n: packed where the packed GEMM runs, refused elsewhere.
        assert_eq!(
            PackedWeight::new(&matrix(700, 90, 3), None).is_some(),
            packs_here(),
            "as deep as 8n"
        );
        let f64s = Tensor::from_vec(vec![4, 4], vec![1.0f64; 16]).expect("tensor");
        assert!(PackedWeight::new(&f64s, None).is_none(), "f64");
        let batch = Tensor::from_vec(vec![2, 4, 4], vec![1.0f32; 32]).expect("tensor");
        assert!(PackedWeight::new(&batch, None).is_none(), "rank 3");
    }
}

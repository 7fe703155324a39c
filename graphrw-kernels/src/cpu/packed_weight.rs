//! A constant weight packed once for the packed f32 GEMM (its AVX-512 or AVX2+FMA
//! kernel), for executors that run the same weights many times
//! ([`Epilogue::packed`](super::Epilogue::packed)).
//!
//! A packed weight remembers which tensor it packs by a weak handle on that tensor's
//! storage and the window it views, so a cache of them neither keeps weights alive nor
//! mistakes another tensor for the one packed: while the handle exists, no other
//! storage can take its address.

use std::sync::Weak;

use crate::cpu::Isa;
use crate::{DType, Storage, Tensor};

#[cfg(target_arch = "x86_64")]
type Packed = super::packed_gemm::PackedB;
/// No packed GEMM off x86-64: [`PackedWeight::new`] gives `None`.
#[cfg(not(target_arch = "x86_64"))]
type Packed = std::convert::Infallible;

/// Columns `columns` of an f32 matrix `[K, N]`, packed for the packed GEMM's kernel
/// for one instruction set ([`PackedWeight::isa`]); or of the transpose of an f32
/// matrix stored `[N, K]` ([`PackedWeight::new_transposed`], for a product by
/// `transpose(w)`: a tied embedding read as a language model's head).
#[derive(Debug)]
pub struct PackedWeight {
    storage: Weak<Storage>,
    offset: usize,
    shape: Vec<usize>,
    columns: (usize, usize),
    /// The tensor stores the transpose of the matrix packed (`[N, K]`).
    transposed: bool,
    pub(crate) packed: Packed,
}

impl PackedWeight {
    /// Products of fewer rows are left to the `gemm` crate by the fixed rule
    /// ([`ProductChoice::Rule`](crate::cpu::choice::ProductChoice::Rule); by default
    /// each shape measures its kernel instead): measured
    /// on a 2-core Zen 4, the packed GEMM is 10-40% faster from 64 rows up at 2 threads
    /// and level on one, but 10-40% slower at 16 rows, where its 12-row tiles waste a
    /// third of their work.
    pub const MIN_ROWS: usize = 64;

    /// Packs columns `columns` (all when `None`) of `b`, an f32 matrix `[K, N]`, for the
    /// kernel of the instruction set the thread's options allow
    /// ([`KernelOptions::isa`](crate::KernelOptions::isa): AVX-512 where the CPU has
    /// it, else AVX2+FMA; capping `max_isa` at AVX2 forces the AVX2+FMA kernel).
    /// `None` where the packed GEMM does not run or does not win: see
    /// [`PackedWeight::new_for`].
    pub fn new(b: &Tensor, columns: Option<(usize, usize)>) -> Option<PackedWeight> {
        PackedWeight::new_for(b, columns, crate::KernelOptions::current().isa())
    }

    /// [`PackedWeight::new`] for the kernel of `isa` (to force the AVX2+FMA kernel on a
    /// CPU with AVX-512, say). `None` where the packed GEMM does not run or does not
    /// win: a CPU without `isa`, [`Isa::Baseline`] (no packed kernel), off x86-64,
    /// another dtype or rank, a column range outside `b`, no elements, or a product
    /// deeper than eight times its width (measured slower than the `gemm` crate on
    /// AVX-512: 0.98x at 32 times, 0.88x at 64 times).
    pub fn new_for(b: &Tensor, columns: Option<(usize, usize)>, isa: Isa) -> Option<PackedWeight> {
        let &[k, n_all] = b.shape() else {
            return None;
        };
        let (start, end) = columns.unwrap_or((0, n_all));
        if k > 8 * end.checked_sub(start)? {
            return None;
        }
        PackedWeight::build(b, columns, isa, Release::Pages, false)
    }

    /// [`PackedWeight::new_for`] at any depth: for a product whose kernel was chosen
    /// by measurement ([`crate::cpu::choice`]), where the depth rule does not apply.
    pub fn new_any_depth(
        b: &Tensor,
        columns: Option<(usize, usize)>,
        isa: Isa,
    ) -> Option<PackedWeight> {
        PackedWeight::build(b, columns, isa, Release::Pages, false)
    }

    /// Packs columns `columns` (all when `None`) of `bt^T`, for `bt` an f32 matrix
    /// stored `[N, K]`: the weight of a product `a @ transpose(bt)` (`a` of depth `K`),
    /// packed straight from `bt` with no transposed copy, for the kernel of `isa`, at
    /// any depth. Column `j` of the product is row `j` of `bt`; a `bt` mapped from an
    /// external data file gives back the pages of its rows as each panel of them is
    /// packed (a later read, by a `gather` of the same tied embedding say, faults them
    /// in again from the file, unchanged). `None` as for [`PackedWeight::new_any_depth`].
    pub fn new_transposed(
        bt: &Tensor,
        columns: Option<(usize, usize)>,
        isa: Isa,
    ) -> Option<PackedWeight> {
        PackedWeight::build(bt, columns, isa, Release::Pages, true)
    }

    /// A packing of a few columns to time the kernel on (of `b^T` when `transposed`):
    /// a weight mapped from a file keeps its pages (they are still read by whichever
    /// kernel wins).
    pub(crate) fn sample(
        b: &Tensor,
        columns: (usize, usize),
        isa: Isa,
        transposed: bool,
    ) -> Option<PackedWeight> {
        PackedWeight::build(b, Some(columns), isa, Release::Keep, transposed)
    }

    fn build(
        b: &Tensor,
        columns: Option<(usize, usize)>,
        isa: Isa,
        release: Release,
        transposed: bool,
    ) -> Option<PackedWeight> {
        let (k, n_all) = match (b.shape(), transposed) {
            (&[k, n_all], false) => (k, n_all),
            (&[n_all, k], true) => (k, n_all),
            _ => return None,
        };
        let (start, end) = columns.unwrap_or((0, n_all));
        let n = end.checked_sub(start)?;
        if b.dtype() != DType::F32 || end > n_all || k == 0 || n == 0 {
            return None;
        }
        if !isa.is_available() {
            return None;
        }
        let packed = if transposed {
            pack_transposed(b, (k, n), start, isa, release)?
        } else {
            pack(b, (k, n), n_all, start, isa, release)?
        };
        Some(PackedWeight {
            storage: b.storage_handle(),
            offset: b.storage_offset(),
            shape: b.shape().to_vec(),
            columns: (start, end),
            transposed,
            packed,
        })
    }

    /// Bytes [`PackedWeight::new`] would hold for `n` columns of depth `k` (panels of
    /// the kernel's width, the last zero-padded, plus 64 bytes to align them), to check
    /// a budget before packing.
    pub fn size_for(k: usize, n: usize) -> usize {
        #[cfg(target_arch = "x86_64")]
        let panel =
            super::packed_gemm::panel_width(crate::KernelOptions::current().isa()).unwrap_or(1);
        #[cfg(not(target_arch = "x86_64"))]
        let panel = 1;
        (n.div_ceil(panel) * panel * k + 16) * std::mem::size_of::<f32>()
    }

    /// The instruction set whose kernel the weight is packed for.
    pub fn isa(&self) -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            self.packed.isa()
        }
        #[cfg(not(target_arch = "x86_64"))]
        match self.packed {}
    }

    /// True when this packs columns `columns` (all when `None`) of `b` itself: the same
    /// storage viewed through the same window, not transposed (a packing of `b^T` is
    /// another matrix: see [`PackedWeight::packs_transposed`]).
    pub fn packs(&self, b: &Tensor, columns: Option<(usize, usize)>) -> bool {
        self.packs_as(b, columns, false)
    }

    /// True when this packs columns `columns` (all when `None`) of `bt^T`
    /// ([`PackedWeight::new_transposed`] of the same storage and window).
    pub fn packs_transposed(&self, bt: &Tensor, columns: Option<(usize, usize)>) -> bool {
        self.packs_as(bt, columns, true)
    }

    /// [`PackedWeight::packs`] (`transposed` false) or
    /// [`PackedWeight::packs_transposed`] (true).
    pub fn packs_as(&self, b: &Tensor, columns: Option<(usize, usize)>, transposed: bool) -> bool {
        let width_dim = if self.transposed { 0 } else { 1 };
        let all = (0, self.shape.get(width_dim).copied().unwrap_or(0));
        self.transposed == transposed
            && std::ptr::eq(self.storage.as_ptr(), b.storage_ptr())
            && self.offset == b.storage_offset()
            && self.shape == b.shape()
            && self.columns == columns.unwrap_or(all)
    }

    /// True when this packs the transpose of the tensor it was made from
    /// ([`PackedWeight::new_transposed`]).
    pub fn is_transposed(&self) -> bool {
        self.transposed
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

/// Whether packing gives a mapped weight's pages back.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Release {
    /// Give each packed block of rows back (a weight packed for good).
    Pages,
    /// Keep them (a sample packed to time a kernel).
    Keep,
}

/// Packs `b`; a weight mapped from an external data file gives each block of its rows'
/// pages back once they are packed
/// ([`MappedFile::release_range`](crate::MappedFile::release_range)), so that packing
/// it holds the weight about once (the packed copy and a block of rows), not twice.
/// A later read of the weight (packing its other columns, or a kernel that does not
/// use the packed copy) faults the pages in again from the page cache.
#[cfg(target_arch = "x86_64")]
fn pack(
    b: &Tensor,
    kn: (usize, usize),
    ldb: usize,
    col0: usize,
    isa: Isa,
    release: Release,
) -> Option<Packed> {
    let data = b.acc_cow::<f32>();
    let external = b
        .file_range()
        .filter(|r| release == Release::Pages && !r.file.holds_model());
    let row_bytes = (ldb * std::mem::size_of::<f32>()) as u64;
    super::packed_gemm::PackedB::pack_by_rows(&data, kn, ldb, col0, isa, &mut |rows| {
        // From the weight's start: the page a block shares with the one before it
        // goes too.
        if let Some(r) = &external {
            r.file.release_range(r.offset, rows.end as u64 * row_bytes);
        }
    })
}

#[cfg(not(target_arch = "x86_64"))]
fn pack(_: &Tensor, _: (usize, usize), _: usize, _: usize, _: Isa, _: Release) -> Option<Packed> {
    None
}

/// Packs columns `col0..col0 + n` of `bt^T` (`bt` stored `[N, k]`); a `bt` mapped from
/// an external data file gives back the pages of its rows as each panel of them is
/// packed: the rows packed so far, from the first row packed (`col0`) on, so that a
/// page two panels share goes with the second. Only rows this packing copied are
/// given back; another reader of them (the `gather` of a tied embedding) faults them
/// in again from the file.
#[cfg(target_arch = "x86_64")]
fn pack_transposed(
    bt: &Tensor,
    (k, n): (usize, usize),
    col0: usize,
    isa: Isa,
    release: Release,
) -> Option<Packed> {
    let data = bt.acc_cow::<f32>();
    let external = bt
        .file_range()
        .filter(|r| release == Release::Pages && !r.file.holds_model());
    let row_bytes = (k * std::mem::size_of::<f32>()) as u64;
    // Bytes of `bt` from the first row packed, and the end of what was given back.
    let first = col0 as u64 * row_bytes;
    let mut released = first;
    super::packed_gemm::PackedB::pack_transposed_by_columns(
        &data,
        (k, n),
        k,
        col0,
        isa,
        &mut |rows| {
            if let Some(r) = &external {
                // From the page holding the end of the last range (packed rows only,
                // never before the first), to the end of these rows.
                const PAGE: u64 = 4096;
                let from = (r.offset + first).max((r.offset + released) / PAGE * PAGE);
                let to = r.offset + rows.end as u64 * row_bytes;
                r.file.release_range(from, to.saturating_sub(from));
                released = rows.end as u64 * row_bytes;
            }
        },
    )
}

#[cfg(not(target_arch = "x86_64"))]
fn pack_transposed(_: &Tensor, _: (usize, usize), _: usize, _: Isa, _: Release) -> Option<Packed> {
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

    /// Whether this CPU runs the packed GEMM (x86-64 with AVX2+FMA or AVX-512).
    fn packs_here() -> bool {
        cfg!(target_arch = "x86_64") && crate::KernelOptions::current().isa() != Isa::Baseline
    }

    #[test]
    fn packs_only_its_own_tensor_and_columns() {
        let b = matrix(64, 96, 1);
        let packed = PackedWeight::new(&b, Some((32, 96)));
        if !packs_here() {
            // No AVX2+FMA (or not x86-64): nothing is packed, anywhere.
            assert!(packed.is_none(), "packed without the packed GEMM");
            println!("SKIPPED: packing a weight needs x86-64 with AVX2+FMA");
            return;
        }
        let w = packed.expect("a weight the packed GEMM runs");
        assert_eq!(w.isa(), crate::KernelOptions::current().isa());
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
        // 64 columns are whole panels of either kernel, plus 64 bytes to align them.
        assert_eq!(w.nbytes(), 64 * 64 * 4 + 64);
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
        let b = matrix(64, 40, 4);
        assert!(
            PackedWeight::new_for(&b, None, Isa::Baseline).is_none(),
            "no kernel"
        );
    }

    /// Each kernel the CPU has packs on request, whatever `new` would choose (the
    /// AVX2+FMA kernel forced on an AVX-512 CPU), with panels of its own width; a
    /// kernel the CPU lacks packs nothing.
    #[test]
    fn packs_for_each_kernel_the_cpu_has() {
        let b = matrix(64, 40, 5);
        for (isa, panel) in [(Isa::Avx2Fma, 16), (Isa::Avx512, 32)] {
            let packed = PackedWeight::new_for(&b, None, isa);
            if !(cfg!(target_arch = "x86_64") && isa.is_available()) {
                assert!(packed.is_none(), "{isa:?} packed without the CPU's support");
                println!("SKIPPED: packing for {isa:?} needs a CPU with it");
                continue;
            }
            let w = packed.expect("packed");
            assert_eq!(w.isa(), isa);
            assert_eq!(w.nbytes(), (40usize.div_ceil(panel) * panel * 64 + 16) * 4);
        }
    }

    /// A packing of the transpose is told apart from a plain packing of the same
    /// tensor, both ways; it refuses what the plain one does (columns outside, no
    /// columns, other ranks), and is the size of the plain packing of the transposed
    /// matrix.
    #[test]
    fn a_transposed_packing_is_not_the_plain_one() {
        let bt = matrix(96, 64, 6);
        let t = PackedWeight::new_transposed(&bt, Some((32, 96)), Isa::Avx2Fma);
        if !(cfg!(target_arch = "x86_64") && Isa::Avx2Fma.is_available()) {
            assert!(t.is_none(), "packed without the packed GEMM");
            println!("SKIPPED: packing a weight needs x86-64 with AVX2+FMA");
            return;
        }
        let t = t.expect("packed");
        assert!(t.is_transposed() && t.packs_transposed(&bt, Some((32, 96))));
        assert!(!t.packs(&bt, Some((32, 96))), "the plain product");
        assert!(!t.packs_transposed(&bt, None), "other columns");
        assert_eq!(t.nbytes(), (64 * 64 + 16) * 4);
        let all = PackedWeight::new_transposed(&bt, None, Isa::Avx2Fma).expect("packed");
        assert!(all.packs_transposed(&bt, Some((0, 96))), "all 96 rows");
        let plain = PackedWeight::new_any_depth(&bt, None, Isa::Avx2Fma).expect("packed");
        assert!(!plain.is_transposed() && !plain.packs_transposed(&bt, None));
        assert!(PackedWeight::new_transposed(&bt, Some((0, 97)), Isa::Avx2Fma).is_none());
        assert!(PackedWeight::new_transposed(&bt, Some((5, 5)), Isa::Avx2Fma).is_none());
        let batch = Tensor::from_vec(vec![2, 4, 4], vec![1.0f32; 32]).expect("tensor");
        assert!(PackedWeight::new_transposed(&batch, None, Isa::Avx2Fma).is_none());
        drop(bt);
        assert!(t.is_orphan());
    }
}

//! Tensors whose elements stay in a file: a read-only memory map ([`MappedFile`]) that
//! [`Tensor::from_mapped`](crate::Tensor::from_mapped) views without copying, and the
//! byte range of the file a tensor came from ([`FileRange`]), which a writer copies to
//! another file without reading it into memory.
//!
//! Pages of a mapped tensor are read from the file (or the page cache) only when a
//! kernel touches them, so loading a model of many gigabytes costs no memory until its
//! weights are used, and writing it back copies file ranges file to file.
//!
//! # The file must not change while it is mapped
//! A mapping shows the file as it is *now*: if another process truncates the file while
//! a tensor maps it, touching a page past the new end raises `SIGBUS`, and bytes written
//! to the file change the tensor's elements. Every memory-mapping loader (onnxruntime,
//! safetensors) makes the same assumption. graphrw checks what it can: a tensor's range
//! must lie within the file's length when it is mapped, and [`FileRange::copy_to`]
//! copies through the file (not the map) and reports a file that became shorter as an
//! error rather than crashing. Writers that replace a model in place must write a new
//! file and rename it over the old one (the old file lives on for existing maps).

use std::fmt;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use half::{bf16, f16};

use crate::DType;

/// A read-only memory map of a whole file, shared by every tensor that views it.
pub struct MappedFile {
    /// `None` for an empty file (nothing to map).
    map: Option<memmap2::Mmap>,
    /// The open file, for [`FileRange::copy_to`] (reads through the file, not the map).
    file: Mutex<File>,
    path: PathBuf,
    len: u64,
    /// True for a model file mapped for its inline `raw_data` ([`MappedFile::open_model`]).
    model: bool,
}

impl fmt::Debug for MappedFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MappedFile({}, {} bytes)", self.path.display(), self.len)
    }
}

impl MappedFile {
    /// Opens and maps `path` read-only. Nothing is read until a mapped tensor's
    /// elements are touched.
    ///
    /// Errors when the file cannot be opened, is not a regular file, or cannot be
    /// mapped (or is larger than the address space).
    pub fn open(path: impl AsRef<Path>) -> io::Result<Arc<MappedFile>> {
        MappedFile::open_as(path.as_ref(), false)
    }

    /// Opens and maps a model file itself (not an external data file): its tensors are
    /// the model's inline weights, viewed in place. [`MappedFile::holds_model`] tells
    /// them apart, so that a writer keeping the input's layout keeps them inline.
    pub fn open_model(path: impl AsRef<Path>) -> io::Result<Arc<MappedFile>> {
        MappedFile::open_as(path.as_ref(), true)
    }

    fn open_as(path: &Path, model: bool) -> io::Result<Arc<MappedFile>> {
        // Checked before opening too: opening a FIFO blocks until a writer comes, so a
        // model folder holding one (as a data file's name) would hang the load.
        if !std::fs::metadata(path)?.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("`{}` is not a regular file", path.display()),
            ));
        }
        let file = File::open(path)?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("`{}` is not a regular file", path.display()),
            ));
        }
        let len = meta.len();
        if usize::try_from(len).is_err() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "`{}` ({len} bytes) is larger than the address space",
                    path.display()
                ),
            ));
        }
        let map = if len == 0 {
            None
        } else {
            // SAFETY: the map is read-only and never handed out as mutable. The file may
            // still be changed by another process while mapped, which would change (or,
            // when truncated, fault on) the bytes behind mapped tensors; this is the
            // documented assumption of this module (see the module docs), shared with
            // every mmap-based model loader. Ranges are checked against `len` here.
            Some(unsafe { memmap2::MmapOptions::new().len(len as usize).map(&file)? })
        };
        Ok(Arc::new(MappedFile {
            map,
            file: Mutex::new(file),
            path: path.to_path_buf(),
            len,
            model,
        }))
    }

    /// True when this is a model file mapped for its inline weights
    /// ([`MappedFile::open_model`]), false for an external data file.
    pub fn holds_model(&self) -> bool {
        self.model
    }

    /// Gives the pages of the map read so far back to the system (`MADV_DONTNEED`):
    /// they leave this process's resident memory, and a later read of them faults
    /// them in again from the file, unchanged. A loader calls it once it has read the
    /// protobuf in place, so only the weights a kernel touches stay resident. Does
    /// nothing where the system has no such advice.
    pub fn release_pages(&self) {
        #[cfg(unix)]
        if let Some(m) = &self.map {
            // SAFETY: the map is a read-only, never-written mapping of a file: dropping
            // its pages changes no byte a borrower sees (a later read faults the same
            // file bytes back in), which is the case `MADV_DONTNEED` is sound for; the
            // "freed pages read as zero" hazard of memmap2's docs concerns anonymous or
            // written private pages, of which this map has none. The advice is only a
            // hint, so an error is ignored.
            let _ = unsafe { m.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
        }
    }

    /// [`MappedFile::release_pages`] for the whole pages inside bytes
    /// `offset..offset + len` alone (pages the range shares with its neighbours stay):
    /// a kernel that keeps its own copy of a mapped weight (packed for a GEMM) gives
    /// the pages back as it copies them, so the process holds the weight about once.
    pub fn release_range(&self, offset: u64, len: u64) {
        #[cfg(unix)]
        if let Some(m) = &self.map {
            const PAGE: u64 = 4096;
            // SAFETY: `sysconf` has no preconditions.
            let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
                .unwrap_or(PAGE)
                .max(1);
            let start = offset.div_ceil(page) * page;
            let end = (offset.saturating_add(len).min(self.len) / page) * page;
            if start >= end {
                return;
            }
            // SAFETY: as in `release_pages`: a read-only, never-written file mapping,
            // whose dropped pages read back the same file bytes; the range lies inside
            // the map (`end <= self.len`) and starts on a page boundary. A hint: an
            // error is ignored.
            let _ = unsafe {
                m.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    start as usize,
                    (end - start) as usize,
                )
            };
        }
    }

    /// The whole mapped file (empty for an empty file).
    pub fn as_bytes(&self) -> &[u8] {
        match &self.map {
            Some(m) => m,
            None => &[],
        }
    }

    /// Reads `len` bytes at `offset` through the file, not the map (so its pages do not
    /// join this process's resident memory).
    ///
    /// Errors when the file became shorter since it was mapped, or on any read error.
    pub fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let src = self
            .file
            .lock()
            .map_err(|_| io::Error::other("the mapped file's lock was poisoned"))?;
        (&*src).seek(SeekFrom::Start(offset))?;
        let mut out = vec![0u8; len];
        (&*src).read_exact(&mut out)?;
        Ok(out)
    }

    /// The path the file was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's length in bytes when it was mapped.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for an empty file.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The mapped bytes `[start, start + len)`, or `None` when they lie beyond the file.
    pub(crate) fn bytes(&self, start: usize, len: usize) -> Option<&[u8]> {
        let end = start.checked_add(len)?;
        match &self.map {
            Some(m) => m.get(start..end),
            None if len == 0 && start == 0 => Some(&[]),
            None => None,
        }
    }
}

/// Element types whose every bit pattern is a valid value, so mapped little-endian
/// bytes may be viewed as a slice of them (not `bool`: only 0 and 1 are valid).
///
/// # Safety
/// Implementors must be plain data: no padding, no invalid bit patterns, and the
/// in-memory layout of the little-endian encoding on a little-endian host.
pub(crate) unsafe trait Plain: Copy + 'static {
    /// The dtype of this element type.
    const DTYPE: DType;
}

// SAFETY: IEEE floats and two's-complement integers have no padding and no invalid bit
// patterns; f16 and bf16 are `repr(transparent)` over `u16`.
unsafe impl Plain for f32 {
    const DTYPE: DType = DType::F32;
}
// SAFETY: as above.
unsafe impl Plain for f64 {
    const DTYPE: DType = DType::F64;
}
// SAFETY: as above.
unsafe impl Plain for f16 {
    const DTYPE: DType = DType::F16;
}
// SAFETY: as above.
unsafe impl Plain for bf16 {
    const DTYPE: DType = DType::BF16;
}
// SAFETY: as above.
unsafe impl Plain for i64 {
    const DTYPE: DType = DType::I64;
}
// SAFETY: as above.
unsafe impl Plain for i32 {
    const DTYPE: DType = DType::I32;
}
// SAFETY: as above.
unsafe impl Plain for u8 {
    const DTYPE: DType = DType::U8;
}
// SAFETY: as above.
unsafe impl Plain for i8 {
    const DTYPE: DType = DType::I8;
}
// SAFETY: as above.
unsafe impl Plain for i16 {
    const DTYPE: DType = DType::I16;
}
// SAFETY: as above.
unsafe impl Plain for u16 {
    const DTYPE: DType = DType::U16;
}
// SAFETY: as above.
unsafe impl Plain for u32 {
    const DTYPE: DType = DType::U32;
}
// SAFETY: as above.
unsafe impl Plain for u64 {
    const DTYPE: DType = DType::U64;
}

/// Elements of one dtype in a [`MappedFile`]: the storage of a mapped tensor.
#[derive(Clone)]
pub struct MappedElements {
    file: Arc<MappedFile>,
    /// Byte offset of the first element in the file (aligned for the dtype).
    start: usize,
    /// Number of elements.
    len: usize,
    dtype: DType,
    /// Where the file's bytes are not aligned for the dtype (an inline `raw_data` sits
    /// at any offset of its model file), or the elements are few and in an external
    /// data file ([`READ_COPY_BYTES`]): an aligned copy, made the first time the
    /// elements are read and shared by every clone. Writers copy the file range and
    /// never read it, so a weight nothing computes with is never copied.
    copy: Arc<OnceLock<Vec<u64>>>,
}

/// Bytes up to which a tensor mapped from an external data file (not a model file's
/// inline `raw_data`, whose pages are never given back) has its elements read through
/// the file into a copy of their own (once, the first time they are read) instead of
/// through the map: a bias or a norm's scale sits between weights in an external data
/// file, and on a kernel that keeps the file's page cache in large folios (Linux 6.x),
/// one read through the map maps the whole folio around it, up to 4 MiB of the
/// neighbouring weights. GPT-2 small at S = 128 (2-core Zen 4, Linux 6.18) grew from 533 to 622 MB
/// resident at its second run, its biases' folios mapped back after the packed
/// weights had given theirs back; with these copies it stays at 533 MB.
pub const READ_COPY_BYTES: usize = 256 << 10;

impl fmt::Debug for MappedElements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MappedElements({} x {} at byte {} of {:?})",
            self.len, self.dtype, self.start, self.file
        )
    }
}

impl MappedElements {
    /// Views `len` elements of `dtype` at byte `start` of `file`, when the dtype can be
    /// viewed in place on this host (not `bool`, a little-endian host) and the bytes lie
    /// within the file; `None` otherwise (the caller copies instead). Elements at an
    /// address not aligned for the dtype are copied once, when first read.
    pub(crate) fn new(
        file: &Arc<MappedFile>,
        start: usize,
        len: usize,
        dtype: DType,
    ) -> Option<MappedElements> {
        if dtype == DType::Bool || cfg!(target_endian = "big") {
            return None;
        }
        let nbytes = len.checked_mul(dtype.size_in_bytes())?;
        file.bytes(start, nbytes)?;
        Some(MappedElements {
            file: Arc::clone(file),
            start,
            len,
            dtype,
            copy: Arc::new(OnceLock::new()),
        })
    }

    /// The dtype of the elements.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no elements are held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The file the elements live in.
    pub fn file(&self) -> &Arc<MappedFile> {
        &self.file
    }

    /// Byte offset of the first element in the file.
    pub fn byte_offset(&self) -> u64 {
        self.start as u64
    }

    /// The elements as `T`, when `T` is their dtype.
    pub(crate) fn typed<T: Plain>(&self) -> Option<&[T]> {
        if T::DTYPE != self.dtype {
            return None;
        }
        let bytes = self
            .file
            .bytes(self.start, self.len * std::mem::size_of::<T>())?;
        let few = bytes.len() <= READ_COPY_BYTES && !self.file.model;
        if few || !(bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>()) {
            let copy = self.copy.get_or_init(|| {
                // Through the file where the elements are few (their map pages stay
                // untouched); through the map where that read fails, or for a large
                // unaligned tensor.
                let read = few
                    .then(|| self.file.read_at(self.start as u64, bytes.len()).ok())
                    .flatten();
                let src = read.as_deref().unwrap_or(bytes);
                let mut words = vec![0u64; src.len().div_ceil(8)];
                for (w, chunk) in words.iter_mut().zip(src.chunks(8)) {
                    let mut b = [0u8; 8];
                    b[..chunk.len()].copy_from_slice(chunk);
                    // The words hold the file's bytes in memory order.
                    *w = u64::from_ne_bytes(b);
                }
                words
            });
            // SAFETY: `copy` holds at least `len * size_of::<T>()` bytes (rounded up to
            // whole words) that are a byte-for-byte copy of the file's elements, lives
            // as long as `self` (the slice borrows `self`, which holds the `Arc`), is
            // never written after `get_or_init`, and its address is aligned for `u64`,
            // which is at least the alignment of every `Plain` type (at most 8 bytes).
            // `T: Plain` accepts every bit pattern in little-endian layout, and mapped
            // storage is only built on little-endian hosts.
            return Some(unsafe {
                std::slice::from_raw_parts(copy.as_ptr().cast::<T>(), self.len)
            });
        }
        // SAFETY: `bytes` is `len * size_of::<T>()` bytes of a live read-only map owned
        // by `self.file` (the slice borrows `self`, which keeps the map alive), its
        // address is aligned for `T` (checked above), `T: Plain` accepts every bit
        // pattern in little-endian layout, and mapped storage is only built on
        // little-endian hosts (`MappedElements::new`). The map is never written through.
        Some(unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<T>(), self.len) })
    }
}

/// A byte range of a file: where a mapped tensor's elements came from.
#[derive(Clone, Debug)]
pub struct FileRange {
    /// The mapped file.
    pub file: Arc<MappedFile>,
    /// Byte offset of the range.
    pub offset: u64,
    /// Length of the range in bytes.
    pub len: u64,
}

impl FileRange {
    /// True when both ranges are the same bytes of the same mapped file.
    pub fn same_as(&self, other: &FileRange) -> bool {
        Arc::ptr_eq(&self.file, &other.file) && self.offset == other.offset && self.len == other.len
    }

    /// Reads the range into memory through the file, not the map, so that the file's
    /// pages do not join this process's resident memory (a writer putting a mapped
    /// weight inline holds only its copy).
    ///
    /// Errors when the file became shorter than the range since it was mapped, or on
    /// any read error.
    pub fn read(&self) -> io::Result<Vec<u8>> {
        let len = usize::try_from(self.len).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "the range is larger than memory",
            )
        })?;
        self.file.read_at(self.offset, len)
    }

    /// Copies the range to `out` at its current position, file to file (the kernel's
    /// `copy_file_range` on Linux, through `std::io::copy`), never through the map or
    /// a buffer of the range's size, so memory stays flat whatever the size. On Linux
    /// the holes of a sparse file are found with `SEEK_DATA`/`SEEK_HOLE` and skipped
    /// (left as holes in `out`); the caller must give `out` its final length
    /// (`File::set_len`) in case the range ends in a hole. `out` is left at the end of
    /// the copied range.
    ///
    /// Errors when the file became shorter than the range since it was mapped (it was
    /// changed under the map), or on any read or write error.
    ///
    /// A range of up to [`SMALL_RANGE`] bytes is read with one positioned read and
    /// written (its holes, if any, as zeros).
    pub fn copy_to(&self, out: &mut File) -> io::Result<()> {
        if let Some(bytes) = self.read_small()? {
            return io::Write::write_all(out, &bytes);
        }
        let src = self
            .file
            .file
            .lock()
            .map_err(|_| io::Error::other("the mapped file's lock was poisoned"))?;
        let now = src.metadata()?.len();
        let end = self.offset.saturating_add(self.len);
        let changed = || {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "`{}` is now {now} bytes, but bytes {}..{end} were mapped from it (the file was changed under the map)",
                    self.file.path.display(),
                    self.offset
                ),
            )
        };
        if end > now {
            return Err(changed());
        }
        let base = out.stream_position()?;
        let mut at = self.offset;
        while at < end {
            let (data, hole) = data_segment(&src, at, end)?;
            if data >= end {
                break;
            }
            (&*src).seek(SeekFrom::Start(data))?;
            out.seek(SeekFrom::Start(base + (data - self.offset)))?;
            let n = hole - data;
            if io::copy(&mut (&*src).take(n), out)? != n {
                return Err(changed());
            }
            at = hole;
        }
        out.seek(SeekFrom::Start(base + self.len))?;
        Ok(())
    }

    /// Streams the range's bytes into `out` through the file (not the map), a buffer
    /// at a time, so that writing a mapped weight inline into a model holds no copy
    /// of it: the writer's memory stays flat whatever the range's size.
    ///
    /// Errors when the file became shorter than the range since it was mapped, or on
    /// any read or write error.
    ///
    /// A range of up to [`SMALL_RANGE`] bytes is read with one positioned read and
    /// written through `out`'s buffer: `std::io::copy` between files costs four system
    /// calls per range (seek, two `statx`, `copy_file_range`), most of the save of a
    /// model with many small constants.
    pub fn write_to(&self, out: &mut impl io::Write) -> io::Result<()> {
        if let Some(bytes) = self.read_small()? {
            return out.write_all(&bytes);
        }
        let src = self
            .file
            .file
            .lock()
            .map_err(|_| io::Error::other("the mapped file's lock was poisoned"))?;
        (&*src).seek(SeekFrom::Start(self.offset))?;
        let copied = io::copy(&mut (&*src).take(self.len), out)?;
        if copied != self.len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "`{}` ended after {copied} of the {} bytes mapped at offset {} (the file was changed under the map)",
                    self.file.path.display(),
                    self.len,
                    self.offset
                ),
            ));
        }
        Ok(())
    }
}

/// Ranges of at most this many bytes are copied by [`FileRange::write_to`] and
/// [`FileRange::copy_to`] through memory, with one positioned read.
pub const SMALL_RANGE: u64 = 64 * 1024;

impl FileRange {
    /// The range's bytes when it is at most [`SMALL_RANGE`] long (`None` otherwise),
    /// read with one positioned read (through the file, not the map, which a file cut
    /// short under it would turn into a fault).
    fn read_small(&self) -> io::Result<Option<Vec<u8>>> {
        if self.len > SMALL_RANGE {
            return Ok(None);
        }
        let src = self
            .file
            .file
            .lock()
            .map_err(|_| io::Error::other("the mapped file's lock was poisoned"))?;
        let mut bytes = vec![0u8; self.len as usize];
        read_exact_at(&src, &mut bytes, self.offset).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "`{}` ended before bytes {}..{} that were mapped from it (the file was changed under the map)",
                    self.file.path.display(),
                    self.offset,
                    self.offset + self.len
                ),
            ),
            _ => e,
        })?;
        Ok(Some(bytes))
    }
}

/// Fills `buf` from `file` at `offset` without moving the file's position where the
/// platform can.
#[cfg(unix)]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

#[cfg(not(unix))]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let mut f = file;
    f.seek(SeekFrom::Start(offset))?;
    f.read_exact(buf)
}

/// The next run of data in `file` at or after `at`, clipped to `end`: `(start, stop)`,
/// with `start == end` when only a hole is left. Where holes cannot be found the whole
/// rest is data.
#[cfg(target_os = "linux")]
fn data_segment(file: &File, at: u64, end: u64) -> io::Result<(u64, u64)> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    let Ok(off) = libc::off_t::try_from(at) else {
        return Ok((at, end));
    };
    // SAFETY: `lseek` only moves the offset of `fd`, which `file` owns and keeps open for
    // this call; it reads and writes no memory of ours. The caller seeks again before
    // reading.
    let data = unsafe { libc::lseek(fd, off, libc::SEEK_DATA) };
    if data < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            // No data after `at`: the rest is a hole.
            Some(libc::ENXIO) => Ok((end, end)),
            // The file system cannot tell: copy everything.
            Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) => Ok((at, end)),
            _ => Err(e),
        };
    }
    let data = (data as u64).min(end);
    if data >= end {
        return Ok((end, end));
    }
    // SAFETY: as above.
    let hole = unsafe { libc::lseek(fd, data as libc::off_t, libc::SEEK_HOLE) };
    let stop = if hole < 0 {
        end
    } else {
        (hole as u64).min(end)
    };
    // A hole never starts at data; should one seem to, copy the rest (always progress).
    Ok((data, if stop > data { stop } else { end }))
}

/// Without `SEEK_DATA`, the whole rest is data.
#[cfg(not(target_os = "linux"))]
fn data_segment(_file: &File, at: u64, end: u64) -> io::Result<(u64, u64)> {
    Ok((at, end))
}

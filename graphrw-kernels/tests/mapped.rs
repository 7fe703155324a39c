//! Mapped tensors: viewed in place when they can be, copied when they cannot, refused
//! beyond the file, and copied back out file to file with holes kept.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::ops::Deref;
use std::path::{Path, PathBuf};

use graphrw_kernels::{cpu, DType, FileRange, MappedFile, Tensor};
use half::f16;

/// A file path in a fresh folder of its own, removed with the folder when this drops
/// (also when the test fails).
struct ScratchFile {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Deref for ScratchFile {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for ScratchFile {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

fn tmp(tag: &str) -> ScratchFile {
    let dir = tempfile::Builder::new()
        .prefix(&format!("graphrw-mapped-{tag}-"))
        .tempdir()
        .expect("temp dir");
    let path = dir.path().join("data.bin");
    ScratchFile { _dir: dir, path }
}

/// A file of `pad` zero bytes, then the little-endian f32s `values`, then `tail` zeros.
fn f32_file(tag: &str, pad: usize, values: &[f32], tail: usize) -> ScratchFile {
    let path = tmp(tag);
    let mut bytes = vec![0u8; pad];
    for v in values {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    bytes.resize(bytes.len() + tail, 0);
    std::fs::write(&path, bytes).expect("write");
    path
}

#[test]
fn aligned_f32_is_viewed_in_place_and_computes() {
    let values: Vec<f32> = (0..12).map(|i| i as f32 * 0.5 - 2.0).collect();
    let path = f32_file("view", 64, &values, 3);
    let file = MappedFile::open(&path).expect("map");
    let t = Tensor::from_mapped(&file, 64, DType::F32, &[3, 4]).expect("tensor");
    let range = t
        .file_range()
        .expect("a mapped tensor keeps its file range");
    assert_eq!((range.offset, range.len), (64, 48));
    assert_eq!(t.as_slice::<f32>().expect("f32"), values.as_slice());
    // Kernels read mapped storage like any other.
    let r = cpu::transpose(&t, 0, 1).expect("transpose");
    assert_eq!(r.shape(), &[4, 3]);
    assert_eq!(r.as_slice::<f32>().expect("f32")[..3], [-2.0, 0.0, 2.0]);
    // A reshape shares the mapped storage and keeps the file range.
    let flat = cpu::reshape(&t, &[12]).expect("reshape");
    assert!(flat.shares_storage_with(&t));
    let fr = flat.file_range().expect("still mapped");
    assert_eq!((fr.offset, fr.len), (64, 48));
}

/// Elements of at most `READ_COPY_BYTES` in an external data file are read through the
/// file into a copy of their own (a read through the map would map the page-cache
/// folio around them, up to megabytes of neighbouring weights); larger ones, and a
/// model file's inline ones, are read in place.
#[test]
fn small_tensors_are_read_through_the_file_large_ones_in_place() {
    use graphrw_kernels::mapped::READ_COPY_BYTES;
    let small_len = 300;
    let large_len = READ_COPY_BYTES / 4 + 16;
    let values: Vec<f32> = (0..small_len + large_len)
        .map(|i| (i % 97) as f32 * 0.25 - 7.0)
        .collect();
    let path = f32_file("small_copy", 64, &values, 0);
    let file = MappedFile::open(&path).expect("map");
    let map = file.as_bytes().as_ptr_range();
    let small = Tensor::from_mapped(&file, 64, DType::F32, &[small_len]).expect("small");
    let large_at = 64 + 4 * small_len as u64;
    let large = Tensor::from_mapped(&file, large_at, DType::F32, &[large_len]).expect("large");
    let small_data = small.as_slice::<f32>().expect("f32");
    let large_data = large.as_slice::<f32>().expect("f32");
    assert_eq!(small_data, &values[..small_len]);
    assert_eq!(large_data, &values[small_len..]);
    let in_map = |p: *const f32| map.contains(&p.cast::<u8>());
    assert!(
        !in_map(small_data.as_ptr()),
        "a small tensor is read from its copy"
    );
    assert!(
        in_map(large_data.as_ptr()),
        "a large tensor is read in place"
    );
    // Both keep their file range, so a writer still copies them file to file.
    assert_eq!(
        small.file_range().expect("mapped").len,
        4 * small_len as u64
    );
    assert!(large.file_range().is_some());
    // Clones and views share the one copy.
    let view = cpu::reshape(&small, &[small_len as i64, 1]).expect("reshape");
    assert_eq!(
        view.as_slice::<f32>().expect("f32").as_ptr(),
        small_data.as_ptr()
    );
    // A model file's inline tensors are read in place, small or not: its pages are
    // never given back, and a model of many small constants would pay a read each.
    let model = MappedFile::open_model(&path).expect("map");
    let inline = Tensor::from_mapped(&model, 64, DType::F32, &[small_len]).expect("inline");
    let inline_data = inline.as_slice::<f32>().expect("f32");
    assert_eq!(inline_data, &values[..small_len]);
    assert!(
        model
            .as_bytes()
            .as_ptr_range()
            .contains(&inline_data.as_ptr().cast::<u8>()),
        "an inline tensor is read in place"
    );
}

#[test]
fn f16_and_i64_map_in_place() {
    let path = tmp("f16");
    let mut bytes = Vec::new();
    let halves: Vec<f16> = (0..5).map(|i| f16::from_f32(i as f32 / 4.0)).collect();
    for h in &halves {
        bytes.extend_from_slice(&h.to_le_bytes());
    }
    bytes.extend_from_slice(&[0u8; 6]); // pad to 16
    for i in [7i64, -3] {
        bytes.extend_from_slice(&i.to_le_bytes());
    }
    std::fs::write(&path, &bytes).expect("write");
    let file = MappedFile::open(&path).expect("map");
    let h = Tensor::from_mapped(&file, 0, DType::F16, &[5]).expect("f16");
    assert!(h.file_range().is_some());
    assert_eq!(h.as_slice::<f16>().expect("f16"), halves.as_slice());
    let i = Tensor::from_mapped(&file, 16, DType::I64, &[2]).expect("i64");
    assert!(i.file_range().is_some());
    assert_eq!(i.to_i64_vec(), vec![7, -3]);
    // Asking for the wrong element type is an error, not a reinterpretation.
    assert!(i.as_slice::<f64>().is_err());
}

#[test]
fn unaligned_is_copied_when_read_and_bool_falls_back_to_a_copy() {
    let values = [1.5f32, -2.0, 3.25];
    let path = f32_file("unaligned", 2, &values, 0);
    let file = MappedFile::open(&path).expect("map");
    let t = Tensor::from_mapped(&file, 2, DType::F32, &[3]).expect("tensor");
    // An unaligned range keeps its file range (a writer copies it file to file) and
    // is copied to aligned memory only when a kernel reads it.
    let range = t.file_range().expect("an unaligned range stays mapped");
    assert_eq!((range.offset, range.len), (2, 12));
    assert_eq!(t.as_slice::<f32>().expect("f32"), &values);
    let r = cpu::reshape(&t, &[3, 1]).expect("reshape");
    assert_eq!(r.as_slice::<f32>().expect("f32"), &values);

    let path = tmp("bool");
    std::fs::write(&path, [0u8, 1, 7, 0]).expect("write");
    let file = MappedFile::open(&path).expect("map");
    let b = Tensor::from_mapped(&file, 0, DType::Bool, &[4]).expect("bool");
    assert!(
        b.file_range().is_none(),
        "bool is copied (only 0 and 1 are valid)"
    );
    assert_eq!(
        b.as_slice::<bool>().expect("bool"),
        &[false, true, true, false]
    );
}

#[test]
fn ranges_beyond_the_file_are_refused() {
    let path = f32_file("beyond", 0, &[1.0, 2.0], 0);
    let file = MappedFile::open(&path).expect("map");
    let e = Tensor::from_mapped(&file, 4, DType::F32, &[2]).expect_err("one past the end");
    assert!(e.to_string().contains("beyond the end"), "{e}");
    let e = Tensor::from_mapped(&file, u64::MAX - 2, DType::F32, &[2]).expect_err("overflow");
    assert!(e.to_string().contains("beyond the end"), "{e}");
    let e = Tensor::from_mapped(&file, 0, DType::F32, &[usize::MAX, 4]).expect_err("numel");
    assert!(e.to_string().contains("too many"), "{e}");
    // An empty file maps, and only an empty tensor fits in it.
    let empty = tmp("empty");
    std::fs::write(&empty, []).expect("write");
    let file = MappedFile::open(&empty).expect("map empty");
    assert_eq!(
        Tensor::from_mapped(&file, 0, DType::F32, &[0])
            .expect("empty")
            .numel(),
        0
    );
    assert!(Tensor::from_mapped(&file, 0, DType::F32, &[1]).is_err());
}

#[test]
fn copy_to_keeps_bytes_and_holes() {
    // 3 MiB + 5 bytes: a data run, a hole of whole chunks, another data run.
    let path = tmp("copy");
    let mb = 1usize << 20;
    {
        let mut f = File::create(&path).expect("create");
        f.write_all(&[9u8; 100]).expect("write");
        f.seek(SeekFrom::Start((2 * mb + 100) as u64))
            .expect("seek");
        f.write_all(&[5u8; 1000]).expect("write");
        f.set_len((3 * mb + 5) as u64).expect("len");
    }
    let file = MappedFile::open(&path).expect("map");
    let t = Tensor::from_mapped(&file, 0, DType::I32, &[(3 * mb + 4) / 4]).expect("tensor");
    let range = t.file_range().expect("mapped");
    let out_path = tmp("copy-out");
    let mut out = File::create(&out_path).expect("create out");
    out.write_all(b"head").expect("head");
    range.copy_to(&mut out).expect("copy");
    out.set_len(4 + range.len).expect("len");
    drop(out);
    #[cfg(target_os = "linux")]
    {
        // The 2 MiB hole was skipped, not written (ext4, xfs, btrfs and tmpfs keep holes).
        use std::os::unix::fs::MetadataExt;
        let on_disk = std::fs::metadata(&out_path).expect("meta").blocks() * 512;
        assert!(
            on_disk < mb as u64,
            "{on_disk} bytes on disk: the hole was written"
        );
    }
    let src = std::fs::read(&path).expect("read src");
    let dst = std::fs::read(&out_path).expect("read dst");
    assert_eq!(&dst[..4], b"head");
    assert!(dst[4..] == src[..3 * mb + 4], "copied bytes differ");
}

/// The range of 1024 mapped f32s whose file is then cut to 100 bytes.
fn range_of_a_file_truncated_under_the_map(tag: &str) -> FileRange {
    let path = f32_file(tag, 0, &[1.0; 1024], 0);
    let file = MappedFile::open(&path).expect("map");
    let t = Tensor::from_mapped(&file, 0, DType::F32, &[1024]).expect("tensor");
    let range = t.file_range().expect("mapped");
    OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open")
        .set_len(100)
        .expect("truncate");
    range
}

#[test]
fn a_file_truncated_under_the_map_is_an_error_when_copied() {
    let range = range_of_a_file_truncated_under_the_map("truncate");
    let mut out = File::create(tmp("truncate-out")).expect("out");
    let e = range.copy_to(&mut out).expect_err("the file shrank");
    assert!(e.to_string().contains("changed under the map"), "{e}");
}

#[test]
fn write_to_streams_the_range_bytes() {
    // Bigger than one copy buffer, at an odd offset, so the stream crosses buffers.
    let values: Vec<f32> = (0..300_000).map(|i| (i % 977) as f32 - 3.5).collect();
    let path = f32_file("stream", 12, &values, 7);
    let file = MappedFile::open(&path).expect("map");
    let t = Tensor::from_mapped(&file, 12, DType::F32, &[values.len()]).expect("tensor");
    let range = t.file_range().expect("mapped");
    let mut out = b"head".to_vec();
    range.write_to(&mut out).expect("stream");
    assert_eq!(&out[..4], b"head");
    assert_eq!(out.len(), 4 + values.len() * 4);
    assert!(out[4..] == t.to_raw_bytes()[..], "streamed bytes differ");
}

#[test]
fn a_file_truncated_under_the_map_is_an_error_when_streamed() {
    let range = range_of_a_file_truncated_under_the_map("truncate-stream");
    let mut out = Vec::new();
    let e = range.write_to(&mut out).expect_err("the file shrank");
    assert!(e.to_string().contains("changed under the map"), "{e}");
}

#[test]
fn small_ranges_are_copied_and_streamed_exactly() {
    // At, just under and just over the size copied through memory, at an odd offset.
    use graphrw_kernels::mapped::SMALL_RANGE;
    for n in [
        1usize,
        7,
        SMALL_RANGE as usize / 4,
        SMALL_RANGE as usize / 4 + 1,
    ] {
        let values: Vec<f32> = (0..n).map(|i| (i % 251) as f32 * 0.5 - 9.0).collect();
        let path = f32_file(&format!("small-{n}"), 20, &values, 3);
        let file = MappedFile::open(&path).expect("map");
        let t = Tensor::from_mapped(&file, 20, DType::F32, &[n]).expect("tensor");
        let range = t.file_range().expect("mapped");
        let want = t.to_raw_bytes();

        let mut streamed = b"head".to_vec();
        range.write_to(&mut streamed).expect("stream");
        assert!(streamed[4..] == want[..], "{n}: streamed bytes differ");

        let out_path = tmp(&format!("small-out-{n}"));
        let mut out = File::create(&out_path).expect("create out");
        out.write_all(b"head").expect("head");
        range.copy_to(&mut out).expect("copy");
        assert_eq!(out.stream_position().expect("pos"), 4 + range.len, "{n}");
        drop(out);
        let copied = std::fs::read(&out_path).expect("read out");
        assert!(copied[4..] == want[..], "{n}: copied bytes differ");
    }
}

/// A tied embedding mapped from an external data file, packed transposed for a
/// product (which gives its pages back as each panel is packed): a lookup of its rows
/// afterwards (the embedding `gather`) reads the file's values unchanged, and the
/// product on the packing is the product by the transpose.
#[test]
fn a_mapped_weight_packed_transposed_still_reads_its_values() {
    let (n, k) = (520, 256);
    let values: Vec<f32> = (0..n * k)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let path = f32_file("tied", 4096, &values, 0);
    let file = MappedFile::open(&path).expect("map");
    let e = Tensor::from_mapped(&file, 4096, DType::F32, &[n, k]).expect("tensor");
    let a_vals: Vec<f32> = (0..3 * k).map(|i| (i % 7) as f32 - 3.0).collect();
    let a = Tensor::from_vec(vec![3, k], a_vals).expect("tensor");
    let want = cpu::matmul(&a, &cpu::transpose(&e, 0, 1).expect("transpose")).expect("matmul");
    let isa = graphrw_kernels::KernelOptions::current().isa();
    let Some(packed) = cpu::PackedWeight::new_transposed(&e, None, isa) else {
        println!("SKIPPED: packing needs x86-64 with AVX2+FMA");
        return;
    };
    let ids = Tensor::from_vec(vec![3], vec![0i64, n as i64 - 1, 300]).expect("ids");
    let rows = cpu::index_select(&e, 0, &ids).expect("lookup");
    let got_rows = rows.to_f64_vec();
    for (r, &id) in [0usize, n - 1, 300].iter().enumerate() {
        for p in 0..k {
            assert_eq!(got_rows[r * k + p], values[id * k + p] as f64, "row {id}");
        }
    }
    let epilogue = cpu::Epilogue {
        packed: Some(&packed),
        transposed: true,
        ..Default::default()
    };
    let got =
        cpu::matmul_epilogue_with(&a, &e, &epilogue, cpu::GemmBackend::Auto).expect("product");
    for (g, w) in got.to_f64_vec().iter().zip(want.to_f64_vec()) {
        assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{g} vs {w}");
    }
}

//! `onnx::open_tensor_pb`: a test-data tensor file read chunk by chunk gives the
//! elements `read_tensor_pb` gives, in order, whatever its size and dtype; a cut or
//! forged file is an error naming the tensor, never a panic.

use graphrw::onnx::{encode_tensor_pb, open_tensor_pb, read_tensor_pb, write_tensor_pb};
use graphrw::{DType, Tensor};

fn ramp(dtype: DType, n: usize) -> Tensor {
    let vals: Vec<f64> = (0..n)
        .map(|i| ((i * 7919) % 1000) as f64 / 64.0 - 7.0)
        .collect();
    Tensor::from_f64_slice(dtype, &[n / 4, 4], &vals).unwrap()
}

/// Every element of the file, chunk by chunk, and the number of chunks.
fn chunked(path: &std::path::Path) -> (Vec<f64>, usize) {
    let file = open_tensor_pb(path).unwrap();
    let (mut values, mut chunks) = (Vec::new(), 0);
    file.for_each_chunk(&mut |c| {
        chunks += 1;
        values.extend(c.iter_f64());
    })
    .unwrap();
    (values, chunks)
}

#[test]
fn chunks_give_the_whole_tensor_in_order() {
    let dir = tempfile::tempdir().unwrap();
    // 8 bytes of f64 x 1.2M: three chunks of 4 MiB; f16 of the same count: one chunk;
    // 400 f32: a small file, read whole.
    for (dtype, n, want_chunks) in [
        (DType::F64, 1_200_000, 3),
        (DType::F32, 1_200_000, 2),
        (DType::F16, 1_200_000, 1),
        (DType::F32, 400, 1),
    ] {
        let path = dir.path().join(format!("{dtype}_{n}.pb"));
        let t = ramp(dtype, n);
        write_tensor_pb(&path, "logits", &t).unwrap();
        let file = open_tensor_pb(&path).unwrap();
        assert_eq!((file.name(), file.dtype()), ("logits", dtype));
        assert_eq!(file.shape(), &[n / 4, 4]);
        let (values, chunks) = chunked(&path);
        assert_eq!(chunks, want_chunks, "{dtype} x {n}");
        assert_eq!(values, read_tensor_pb(&path).unwrap().1.to_f64_vec());
    }
}

#[test]
fn cut_and_forged_files_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = encode_tensor_pb("logits", &ramp(DType::F32, 1_000_000));
    // Cut inside the raw data: the fast reader refuses it and the whole read says why.
    let cut = dir.path().join("cut.pb");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    assert!(open_tensor_pb(&cut).is_err());
    // Dims that need more bytes than the raw data holds.
    let mut forged = bytes.clone();
    // The first dim, 250000, is the varint `90 a1 0f` among the first bytes (the
    // fields are written in tag order, dims first).
    let dims_at = forged[..32]
        .windows(3)
        .position(|w| w == [0x90, 0xa1, 0x0f])
        .expect("the first dim as a varint");
    forged[dims_at] = 0x91; // 250001 rows
    let path = dir.path().join("forged.pb");
    std::fs::write(&path, &forged).unwrap();
    let err = open_tensor_pb(&path).err().expect("refused").to_string();
    assert!(
        err.contains("logits") && err.contains("raw_data holds"),
        "{err}"
    );
}

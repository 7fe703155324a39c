//! Memory across the crate's edge: a caller's buffer read in place
//! (`Tensor::from_external`) and a tensor's buffer handed over (`Tensor::export`).

use std::sync::{Arc, Mutex};

use graphrw_kernels::{cpu, DType, Tensor};

/// A caller's buffer: the owner a tensor keeps, here a vector behind a mutex (so the
/// test can check when it is dropped and write it after the tensors are gone).
type Buffer = Arc<Mutex<Vec<f32>>>;

fn view(buffer: &Buffer, shape: &[usize]) -> Tensor {
    let address = buffer.lock().unwrap().as_ptr() as usize;
    let owner: graphrw_kernels::external::Owner = Arc::new(Arc::clone(buffer));
    // SAFETY: the vector is never resized, and the test writes it only after every
    // tensor viewing it is dropped (checked through the Arc's count).
    unsafe { Tensor::from_external(owner, address, DType::F32, shape) }.unwrap()
}

#[test]
fn an_external_buffer_is_read_in_place_and_kept_alive() {
    let buffer: Buffer = Arc::new(Mutex::new((0..12).map(|v| v as f32).collect()));
    let address = buffer.lock().unwrap().as_ptr() as usize;
    let t = view(&buffer, &[3, 4]);
    assert!(t.is_external());
    assert_eq!(
        t.address(),
        address,
        "the tensor reads the caller's buffer itself"
    );
    assert_eq!(Arc::strong_count(&buffer), 2, "the tensor holds the owner");
    let doubled = cpu::binary(cpu::BinaryOp::Add, &t, &t).unwrap();
    assert!(!doubled.is_external());
    assert_eq!(doubled.as_slice::<f32>().unwrap()[11], 22.0);
    drop(t);
    assert_eq!(
        Arc::strong_count(&buffer),
        1,
        "the owner is dropped with the tensor"
    );
}

#[test]
fn kept_and_exported_external_elements_are_copies() {
    let buffer: Buffer = Arc::new(Mutex::new(vec![1.0, 2.0, 3.0, 4.0]));
    let t = view(&buffer, &[4]);
    let owned = t.clone().into_owned();
    assert!(!owned.is_external() && !owned.shares_storage_with(&t));
    let (exported, copied) = t.export();
    assert!(copied, "external elements are never handed over");
    assert_eq!(Arc::strong_count(&buffer), 1);
    buffer.lock().unwrap()[0] = 100.0;
    assert_eq!(owned.as_slice::<f32>().unwrap()[0], 1.0);
    assert_eq!(exported.nbytes(), 16);
}

#[test]
fn an_external_buffer_is_never_written_by_a_growing_cache() {
    let buffer: Buffer = Arc::new(Mutex::new(vec![1.0, 2.0]));
    let t = view(&buffer, &[1, 2]);
    let mut cache = cpu::RowCache::new(&t, 0).unwrap();
    cache
        .append(&Tensor::from_vec(vec![1, 2], vec![3.0f32, 4.0]).unwrap())
        .unwrap();
    assert_eq!(*buffer.lock().unwrap(), vec![1.0, 2.0]);
    let rows = cache.to_tensor().unwrap();
    assert_eq!(rows.as_slice::<f32>().unwrap(), &[1.0, 2.0, 3.0, 4.0]);
}

#[test]
fn bool_and_misaligned_buffers_are_copied() {
    let bytes: Arc<Vec<u8>> = Arc::new(vec![0, 1]);
    let at = bytes.as_ptr() as usize;
    // SAFETY: `bytes` is never written and outlives the tensor.
    let flags = unsafe { Tensor::from_external(bytes.clone(), at, DType::Bool, &[2]) }.unwrap();
    assert!(!flags.is_external());
    assert_eq!(flags.as_slice::<bool>().unwrap(), &[false, true]);

    // Two f32 one byte into a 4-aligned buffer of four.
    let words: Arc<Vec<f32>> = Arc::new(vec![0.0; 4]);
    let odd = words.as_ptr() as usize + 1;
    // SAFETY: bytes 1..9 of the 16-byte vector, never written, which outlives the tensor.
    let t = unsafe { Tensor::from_external(words.clone(), odd, DType::F32, &[2]) }.unwrap();
    assert!(!t.is_external());
    assert_ne!(t.address(), odd);
    assert_eq!(t.as_slice::<f32>().unwrap(), &[0.0, 0.0]);
}

#[test]
fn export_hands_over_an_unshared_buffer_and_copies_a_shared_one() {
    let t = Tensor::from_vec(vec![2, 2], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
    let address = t.address();
    let (exported, copied) = t.export();
    assert!(!copied);
    assert_eq!(exported.address(), address, "its own buffer, not a copy");
    assert_eq!(
        (exported.shape(), exported.nbytes()),
        (&[2usize, 2][..], 16)
    );

    let weight = Tensor::from_vec(vec![3], vec![1i64, 2, 3]).unwrap();
    let (exported, copied) = weight.clone().export();
    assert!(copied, "a storage another tensor holds is copied");
    assert_ne!(exported.address(), weight.address());
}

use graphrw_kernels::{cpu, DType, KernelError, Tensor};
use half::{bf16, f16};

#[test]
fn from_vec_checks_numel() {
    let t = Tensor::from_vec(vec![2, 3], vec![1i64, 2, 3, 4, 5, 6]).unwrap();
    assert_eq!(
        (t.shape(), t.rank(), t.numel(), t.nbytes()),
        (&[2usize, 3][..], 2, 6, 48)
    );
    assert_eq!(t.dtype(), DType::I64);
    let err = Tensor::from_vec(vec![2, 2], vec![1.0f32; 3]).unwrap_err();
    assert!(
        matches!(
            err,
            KernelError::NumelMismatch {
                expected: 4,
                got: 3,
                ..
            }
        ),
        "{err}"
    );
    assert!(Tensor::from_vec(vec![usize::MAX, 2], Vec::<bool>::new()).is_err());
}

#[test]
fn scalar_zeros_full() {
    let s = Tensor::scalar(2.5f64);
    assert_eq!(s.shape(), &[] as &[usize]);
    assert_eq!(s.to_f64_vec(), vec![2.5]);
    let z = Tensor::zeros(DType::BF16, &[2, 0, 3]);
    assert_eq!(z.numel(), 0);
    assert_eq!(
        Tensor::full(DType::I32, &[3], -2.7).to_i64_vec(),
        vec![-2, -2, -2]
    );
    assert_eq!(
        Tensor::full(DType::Bool, &[2], 0.5)
            .as_slice::<bool>()
            .unwrap(),
        &[true, true]
    );
}

#[test]
fn as_slice_checks_dtype() {
    let t = Tensor::from_vec(vec![2], vec![f16::from_f32(1.0), f16::from_f32(2.0)]).unwrap();
    assert_eq!(t.as_slice::<f16>().unwrap().len(), 2);
    let err = t.as_slice::<f32>().unwrap_err();
    assert_eq!(err.to_string(), "as_slice: dtype mismatch: f32 vs f16");
}

#[test]
fn raw_bytes_round_trip_every_dtype() {
    for dtype in DType::ALL {
        let t = Tensor::from_f64_slice(dtype, &[2, 2], &[1.0, -2.0, 0.0, 3.0]).unwrap();
        let bytes = t.to_raw_bytes();
        assert_eq!(bytes.len(), 4 * dtype.size_in_bytes());
        let back = Tensor::from_raw_bytes(dtype, &[2, 2], &bytes).unwrap();
        assert_eq!(back.to_f64_vec(), t.to_f64_vec(), "{dtype}");
        assert!(Tensor::from_raw_bytes(dtype, &[2, 2], &bytes[1..]).is_err());
    }
    let le = [0u8, 0, 128, 63]; // 1.0f32
    assert_eq!(
        Tensor::from_raw_bytes(DType::F32, &[], &le)
            .unwrap()
            .to_f64_vec(),
        vec![1.0]
    );
}

#[test]
fn cast_follows_torch() {
    let t = Tensor::from_vec(vec![5], vec![-1.7f32, 2.9, f32::NAN, 0.0, 1e10]).unwrap();
    assert_eq!(
        t.cast(DType::I64).to_i64_vec(),
        vec![-1, 2, 0, 0, 10_000_000_000]
    );
    assert_eq!(
        t.cast(DType::Bool).as_slice::<bool>().unwrap(),
        &[true, true, true, false, true]
    );
    assert_eq!(
        t.cast(DType::BF16).as_slice::<bf16>().unwrap()[0],
        bf16::from_f32(-1.7)
    );
    let big = Tensor::from_vec(vec![1], vec![(1i64 << 60) + 1]).unwrap();
    assert_eq!(big.cast(DType::I64).to_i64_vec(), vec![(1i64 << 60) + 1]);
    assert_eq!(big.cast(DType::I32).to_i64_vec(), vec![1]);
    let same = t.cast(DType::F32);
    assert!(same.shares_storage_with(&t));
    assert!(!cpu::cast(&t, DType::F64).unwrap().shares_storage_with(&t));
}

#[test]
fn clone_and_reshape_share_storage() {
    let t = Tensor::from_vec(vec![2, 3], (0..6).map(|v| v as f32).collect()).unwrap();
    assert!(t.clone().shares_storage_with(&t));
    let r = cpu::reshape(&t, &[3, -1]).unwrap();
    assert!(r.shares_storage_with(&t));
    assert_eq!(r.shape(), &[3, 2]);
    assert!(!cpu::contiguous(&t).unwrap().shares_storage_with(&t));
}

#[test]
fn debug_is_short() {
    let t = Tensor::zeros(DType::F32, &[1000, 1000]);
    let s = format!("{t:?}");
    assert!(s.starts_with("Tensor(f32[1000, 1000], [0.0, 0.0"), "{s}");
    assert!(s.len() < 200, "{s}");
    assert!(s.contains("999992 more"), "{s}");
}

#[test]
fn scalar_f64_reads_the_only_element_of_every_dtype() {
    assert_eq!(Tensor::scalar(2.5f64).scalar_f64(), Some(2.5));
    assert_eq!(Tensor::scalar(f16::from_f32(-0.5)).scalar_f64(), Some(-0.5));
    assert_eq!(Tensor::scalar(bf16::from_f32(4.0)).scalar_f64(), Some(4.0));
    assert_eq!(Tensor::scalar(7i64).scalar_f64(), Some(7.0));
    assert_eq!(Tensor::scalar(true).scalar_f64(), Some(1.0));
    // One element of any rank counts; more or fewer do not.
    let one = Tensor::from_vec(vec![1, 1], vec![3.0f32]).unwrap();
    assert_eq!(one.scalar_f64(), Some(3.0));
    assert_eq!(Tensor::full(DType::F32, &[2], 1.0).scalar_f64(), None);
    assert_eq!(Tensor::full(DType::F32, &[0], 1.0).scalar_f64(), None);
    // A one-element slice of a bigger tensor reads its own element, not the first.
    let v = Tensor::from_vec(vec![3], vec![1.0f32, 2.0, 3.0]).unwrap();
    let last = cpu::slice(&v, 0, 2, 3, 1).unwrap();
    assert_eq!(last.scalar_f64(), Some(3.0));
}

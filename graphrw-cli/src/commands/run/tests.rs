//! Tests of `graphrw run`'s comparisons, tolerances and report lines.

#[test]
fn ratios_keep_three_significant_digits() {
    assert_eq!(super::significant(0.9123), "0.912");
    assert_eq!(super::significant(0.003512), "3.51e-3");
    assert_eq!(super::significant(2.0), "2.000");
    assert!(super::significant(0.0004).parse::<f64>().unwrap() > 0.0);
}

use super::*;

fn tensor(dtype: DType, values: &[f64]) -> Tensor {
    Tensor::from_f64_slice(dtype, &[values.len()], values).expect("tensor")
}

/// `--profile` lists each node that ran as its decomposition with every executor's
/// refusal, a user checker's reason included.
#[test]
fn fallback_lines_keep_a_user_checkers_reason() {
    use graphrw::exec::{OpExecutor, ReferenceCpu};
    use graphrw::{Builder, Shape, TensorMeta};
    let b = Builder::new();
    let q = b.input(
        "q",
        TensorMeta::new(DType::F32, Shape::known(&[1, 2, 4, 8])),
    );
    let out = q
        .scaled_dot_product_attention(q, q, None)
        .expect("attention");
    b.output(&[out]).expect("output");
    let picky = OpExecutor::new("picky").with_checked_kernel(
        &graphrw::ops::builtin::SCALED_DOT_PRODUCT_ATTENTION,
        |_| Err("head size 8 is below the kernel's 64".into()),
        |_, _| Err("never runs".into()),
    );
    let stack: Vec<Arc<dyn Executor>> = vec![Arc::new(picky), Arc::new(ReferenceCpu)];
    let plan = exec::plan(&b.finish(), &stack).expect("plan");
    let lines = fallback_lines(&plan);
    assert_eq!(
        lines[0],
        "1 node(s) ran as their decomposition (no executor took them)"
    );
    assert!(
        lines[1].contains("scaled_dot_product_attention(q, q, q"),
        "{lines:?}"
    );
    assert_eq!(
        lines[2..],
        [
            "    refused by picky: head size 8 is below the kernel's 64",
            "    refused by cpu-reference: runs attention through its decomposition",
        ]
    );
}

#[test]
fn low_precision_outputs_are_held_to_ulps_of_their_type() {
    // Four f16 ulps at 2.0 (4 x 2^-9) are within an f16 output's tolerance but
    // outside an f32 output's.
    let want = [2.0, -1.0, 0.5];
    let got = [2.0 + 4.0 * 2f64.powi(-9), -1.0, 0.5];
    assert!(
        compare(&tensor(DType::F16, &got), &tensor(DType::F16, &want))
            .expect("same shape")
            .ok
    );
    assert!(
        !compare(&tensor(DType::F32, &got), &tensor(DType::F32, &want))
            .expect("same shape")
            .ok
    );
    // A wrong f16 value is still caught.
    let wrong = [2.25, -1.0, 0.5];
    assert!(
        !compare(&tensor(DType::F16, &wrong), &tensor(DType::F16, &want))
            .expect("same shape")
            .ok
    );
    // bf16 has 8 significant bits: one ulp at 2.0 is 2^-6.
    let got = [2.0 + 2f64.powi(-6), -1.0, 0.5];
    assert!(
        compare(&tensor(DType::BF16, &got), &tensor(DType::BF16, &want))
            .expect("same shape")
            .ok
    );
    assert!(
        !compare(&tensor(DType::BF16, &wrong), &tensor(DType::BF16, &want))
            .expect("same shape")
            .ok
    );
}

#[test]
fn a_reference_read_in_chunks_is_compared_element_for_element() {
    // 1.5M f32 values: two chunks of the reference file, so an element lost or
    // shifted at a chunk's end would show.
    let n = 1_500_000;
    let values: Vec<f64> = (0..n).map(|i| (i % 977) as f64 / 8.0).collect();
    let want = tensor(DType::F32, &values);
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("output_0.pb");
    graphrw::onnx::write_tensor_pb(&path, "y", &want).expect("written");
    let file = graphrw::onnx::open_tensor_pb(&path).expect("opened");
    let same = compare_chunks(&want, &file).expect("same shape");
    assert!(same.ok && same.max_abs == 0.0);
    // One wrong element past the first chunk, and one at the very end.
    for at in [graphrw::onnx::CHUNK_BYTES / 4 + 3, n - 1] {
        let mut off = values.clone();
        off[at] += 1.0;
        let e = compare_chunks(&tensor(DType::F32, &off), &file).expect("same shape");
        assert!(!e.ok && e.max_abs == 1.0, "element {at}: {e:?}");
    }
    let short = tensor(DType::F32, &values[..n - 1]);
    assert!(compare_chunks(&short, &file).is_err());
}

use graphrw::fused_kernel;

fused_kernel! {
    /// Squared ReLU, as Primer writes it.
    #[op = "my.relu2"]
    #[grad]
    pub fn relu2(x: Tensor) -> Tensor {
        x.relu().pow(2.0) | x.relu().mul(x.relu())
    }
}

fn main() {
    let x = graphrw::Tensor::from_vec(vec![4], vec![-1f32, 0.5, 2.0, 3.0]).unwrap();
    let y = (relu2::KERNEL.cpu)(&[&x], &[], graphrw::DType::F32).unwrap();
    assert_eq!(y.to_f64_vec(), vec![0.0, 0.25, 4.0, 9.0]);
    assert_eq!(relu2::OP.name, "my.relu2");
    assert!(relu2::CUDA_SOURCE.contains("extern \"C\" __global__ void relu2("));
    assert_eq!(relu2::VJP.len(), 1);
}

use graphrw::fused_kernel;

fused_kernel! {
    fn proj_gelu(x: Tensor, w: Tensor) -> Tensor {
        x.matmul(w).erf()
    }
}

fn main() {}

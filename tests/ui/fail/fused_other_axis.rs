use graphrw::fused_kernel;

fused_kernel! {
    fn col_norm(x: Tensor) -> Tensor {
        x.div(x.sum(dims = [0], keepdim = true))
    }
}

fn main() {}

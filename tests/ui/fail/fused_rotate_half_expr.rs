use graphrw::fused_kernel;

fused_kernel! {
    fn scaled_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor {
        x.mul(cos).add(x.mul(2.0).rotate_half().mul(sin))
    }
}

fn main() {}

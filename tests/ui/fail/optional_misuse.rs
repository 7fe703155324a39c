use graphrw::pattern;

pattern! {
    /// Two optional operands in one call.
    fn two(x: Tensor, a: Option<Tensor>, b: Option<Tensor>) -> Tensor {
        add(a?, b?).neg().add(x)
    }

    /// `?` outside an operand.
    fn outside(x: Tensor) -> Tensor {
        x.relu()?.neg()
    }

    /// `opt` whose step does not use its parameter.
    fn unused(x: Tensor, y: Tensor) -> Tensor {
        opt(x, |t| y.relu()).neg()
    }
}

fn main() {}

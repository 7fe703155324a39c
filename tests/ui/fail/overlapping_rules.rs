use graphrw::rule_set;

rule_set! {
    static SET;

    rule div_by_x(x: Tensor, y: Tensor) -> Tensor {
        x.div(y.relu())
    } => {
        x.div(y)?
    }

    rule div_of_relu(x: Tensor, y: Tensor) -> Tensor {
        x.relu().div(y)
    } => {
        x.div(y)?
    }
}

fn main() {}

use graphrw::rule_set;

rule_set! {
    static SET;

    #[verify(skip = "")]
    rule neg_neg(x: Tensor) -> Tensor {
        x.neg().neg()
    } => {
        x
    }

    #[verify(grahps = 3)]
    rule relu_relu(x: Tensor) -> Tensor {
        x.relu().relu()
    } => {
        x.relu()?
    }
}

fn main() {}

use graphrw::rule_set;

rule_set! {
    static SET;

    #[priority(5)]
    rule any_softmax(x: Tensor) -> Tensor {
        x.softmax(_)
    } => {
        x.softmax(-1)?
    }

    rule last_softmax(x: Tensor) -> Tensor {
        x.softmax(-1)
    } => {
        x.softmax(-1)?
    }
}

fn main() {}

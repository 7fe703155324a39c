use graphrw::rule_set;

rule_set! {
    static RULES;

    rule r(x: Tensor, m: Option<Tensor>) -> Tensor {
        x.relu().add(m?).neg()
    } => {
        x.add(m)?
    }
}

fn main() {}

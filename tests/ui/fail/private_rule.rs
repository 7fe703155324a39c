//! A rule written without `pub` is private to the module that holds its `rule_set!`.
mod mlp {
    graphrw::rule_set! {
        pub static MLP;

        rule silu(x: Tensor) -> Tensor {
            x.mul(x.sigmoid())
        } => {
            x.silu()?
        }
    }
}

fn main() {
    let _ = &mlp::silu::PATTERN;
}

//! `pub rule` makes a rule's module (its `PATTERN`, `RULE`, `Match`, `replace`) reachable
//! from outside the module that holds the `rule_set!`, e.g. for `explain`; the set also
//! looks a rule up by name.
use graphrw::{Builder, DType, TensorMeta};

mod mlp {
    graphrw::rule_set! {
        pub static MLP;

        rule silu(x: Tensor) -> Tensor {
            x.mul(x.sigmoid())
        } => {
            x.silu()?
        }

        /// Reachable as `mlp::swiglu_mlp`.
        pub rule swiglu_mlp(x: Tensor, wg: Tensor, wu: Tensor) -> Tensor {
            let h = x.matmul(wg);
            h.mul(h.sigmoid()).mul(x.matmul(wu))
        } => {
            x.matmul(wg)?.silu()?.mul(x.matmul(wu)?)?
        }

        pub(crate) rule relu_relu(x: Tensor) -> Tensor {
            x.relu().relu()
        } => {
            x.relu()?
        }
    }
}

fn main() {
    let b = Builder::new();
    let x = b.input("x", TensorMeta::new(DType::F32, [2usize, 4]));
    let w = b.input("w", TensorMeta::new(DType::F32, [4usize, 4]));
    let y = x.matmul(w).unwrap().relu().unwrap();
    b.output(&[y]).unwrap();
    let graph = b.finish();
    // No `mul` in the graph: no candidate to explain.
    assert!(graphrw::pattern::near_misses(&mlp::swiglu_mlp::PATTERN, &graph).is_empty());
    assert_eq!(mlp::swiglu_mlp::RULE.name, "swiglu_mlp");
    assert_eq!(mlp::relu_relu::PATTERN.op_count, 2);
    let by_name = mlp::MLP.rule("swiglu_mlp").unwrap();
    assert!(std::ptr::eq(by_name, &mlp::swiglu_mlp::RULE));
}

//! `where` constraints: rank, dtype, dims, scalar comparisons, users, check, pred.
use graphrw::pattern::Bindings;
use graphrw::{pattern, Graph};

fn always(_: &Graph, _: &Bindings) -> bool {
    true
}

pattern! {
    fn attn(q: Tensor, k: Tensor, s: f64) -> Tensor
    where
        rank(q) == 4,
        dtype(q) == f16,
        dtype(q) == dtype(k),
        dim(q, -1) == dim(k, -1),
        dim(q, -1) <= 128,
        s > 0.0,
        users(t) == 1,
        check(|q, s| q.rank() == 4 && s < 100.0),
        pred(always),
    {
        let t = k.transpose(-2, -1);
        q.matmul(t).mul(s)
    }
}

fn main() {
    assert_eq!(attn::PATTERN.constraints.len(), 9);
}

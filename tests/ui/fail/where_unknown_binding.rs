use graphrw::pattern;

pattern! {
    fn p(query: Tensor) -> Tensor
    where
        rank(qeury) == 4,
    {
        query.relu()
    }
}

fn main() {}

//! Property tests: broadcasting binary ops against the reference, and layout round trips.

use graphrw_kernels::cpu::{self, BinaryOp};
use graphrw_kernels::{DType, Tensor};
use proptest::prelude::*;

use crate::common::{broadcast, broadcast_index, rand_tensor, unravel, Rng};

/// A shape and a second shape broadcast-compatible with it.
fn broadcast_pair() -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
    prop::collection::vec((0usize..4, 0u8..3), 0..4).prop_flat_map(|dims| {
        let a: Vec<usize> = dims.iter().map(|&(d, _)| d).collect();
        // Per dim of b: same size, 1, or (for the a side) 1 while b keeps the size.
        let b: Vec<usize> = dims
            .iter()
            .map(|&(d, k)| if k == 1 { 1 } else { d })
            .collect();
        let a: Vec<usize> = a
            .iter()
            .zip(&dims)
            .map(|(&d, &(_, k))| if k == 2 { 1 } else { d })
            .collect();
        (Just(a), 0..=b.len()).prop_map(move |(a, drop)| (a, b[drop..].to_vec()))
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    #[test]
    fn binary_broadcasting_matches_reference((sa, sb) in broadcast_pair(), seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let a = rand_tensor(&mut rng, DType::F32, &sa);
        let b = rand_tensor(&mut rng, DType::F32, &sb);
        let shape = broadcast(&sa, &sb).unwrap();
        let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
        for (op, f) in [
            (BinaryOp::Add, (|x, y| x + y) as fn(f64, f64) -> f64),
            (BinaryOp::Mul, |x, y| x * y),
            (BinaryOp::Lt, |x, y| (x < y) as u8 as f64),
        ] {
            let out = cpu::binary(op, &a, &b).unwrap();
            prop_assert_eq!(out.shape(), &shape[..]);
            let got = out.to_f64_vec();
            for (i, &g) in got.iter().enumerate() {
                let idx = unravel(i, &shape);
                let e = f(av[broadcast_index(&idx, &sa)], bv[broadcast_index(&idx, &sb)]);
                prop_assert!((g - e).abs() <= 1e-5 * (1.0 + e.abs()), "{:?} at {}: {} vs {}", op, i, g, e);
            }
        }
    }

    #[test]
    fn permute_round_trips(shape in prop::collection::vec(0usize..4, 0..5), seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let x = rand_tensor(&mut rng, DType::I32, &shape);
        let mut perm: Vec<i64> = (0..shape.len() as i64).collect();
        for i in (1..perm.len()).rev() {
            perm.swap(i, rng.int(0, i as i64 + 1) as usize);
        }
        let mut inverse = vec![0i64; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            inverse[p as usize] = i as i64;
        }
        let y = cpu::permute(&x, &perm).unwrap();
        let back = cpu::permute(&y, &inverse).unwrap();
        prop_assert_eq!(back.shape(), x.shape());
        prop_assert_eq!(back.to_i64_vec(), x.to_i64_vec());
    }

    #[test]
    fn reshape_round_trips_and_shares(shape in prop::collection::vec(1usize..5, 0..5)) {
        let n: usize = shape.iter().product();
        let x = Tensor::from_vec(shape.clone(), (0..n as i64).collect::<Vec<i64>>()).unwrap();
        let flat = cpu::reshape(&x, &[-1]).unwrap();
        let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        let back = cpu::reshape(&flat, &dims).unwrap();
        prop_assert!(back.shares_storage_with(&x));
        prop_assert_eq!(back.shape(), x.shape());
        prop_assert_eq!(back.to_i64_vec(), x.to_i64_vec());
    }
}

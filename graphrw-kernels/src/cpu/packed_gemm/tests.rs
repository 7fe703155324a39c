//! The packed GEMM on every kernel this CPU has (the AVX2+FMA kernel on AVX-512 CPUs
//! too) against a plain f64 reference.

use super::*;
use crate::testing::compare::{assert_close, Tol};

fn widen(c: &[f32]) -> Vec<f64> {
    c.iter().map(|&x| x as f64).collect()
}

fn reference(m: usize, k: usize, n: usize, a: &[f32], b: &[f32]) -> Vec<f64> {
    let mut c = vec![0f64; m * n];
    for i in 0..m {
        for p in 0..k {
            for j in 0..n {
                c[i * n + j] += a[i * k + p] as f64 * b[p * n + j] as f64;
            }
        }
    }
    c
}

fn values(len: usize, seed: usize) -> Vec<f32> {
    (0..len)
        .map(|i| (((i + seed * 31) * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect()
}

/// The kernels this CPU runs (AVX2+FMA, AVX-512), to run a test on each. For each one
/// it lacks, checks the fallback's premise, that the GEMM refuses to run rather than
/// compute, and prints the skip.
fn kernels_here(test: &str) -> Vec<Isa> {
    let mut here = Vec::new();
    for isa in [Isa::Avx2Fma, Isa::Avx512] {
        if isa.is_available() {
            here.push(isa);
            continue;
        }
        let packed = pack(&values(8 * 4, 1), (8, 4), 4, 0, isa);
        let mut c = vec![0.0; 2 * 4];
        let refused = gemm(
            2,
            &values(2 * 8, 2),
            8,
            &packed,
            &mut c,
            Layout::rows(4),
            TileStore::default(),
        )
        .expect_err("the packed GEMM ran on a CPU without its instruction set");
        assert!(refused.0.contains("lacks"), "{refused:?}");
        println!("SKIPPED: {test} on {isa:?}, which this CPU lacks (checked: it refuses to run)");
    }
    here
}

/// [`PackedB::pack`] for a kernel that has a packed form.
fn pack(b: &[f32], kn: (usize, usize), ldb: usize, col0: usize, isa: Isa) -> PackedB {
    PackedB::pack(b, kn, ldb, col0, isa).expect("a kernel with a packed form")
}

#[test]
fn tile_rectangles_cover_each_run_once() {
    for panels in [1, 2, 5, 24] {
        for tiles in [1, 2, 3, 43] {
            let units = tiles * panels;
            for threads in 1..=5 {
                let mut seen = vec![0u8; units];
                for t in 0..threads {
                    let share = (units * t / threads, units * (t + 1) / threads);
                    let mut count = 0;
                    for ((r0, r1), (c0, c1)) in tile_rectangles(share, panels) {
                        assert!(r0 < r1 && r1 <= tiles && c0 < c1 && c1 <= panels);
                        for r in r0..r1 {
                            for c in c0..c1 {
                                let u = r * panels + c;
                                assert!((share.0..share.1).contains(&u));
                                seen[u] += 1;
                                count += 1;
                            }
                        }
                    }
                    assert_eq!(count, share.1 - share.0);
                }
                assert!(seen.iter().all(|&s| s == 1), "{tiles}x{panels}, {threads}");
            }
        }
    }
}

#[test]
fn matches_the_reference_on_odd_shapes() {
    for isa in kernels_here("matches_the_reference_on_odd_shapes") {
        matches_the_reference_on_odd_shapes_on(isa);
    }
}

fn matches_the_reference_on_odd_shapes_on(isa: Isa) {
    for (m, k, n) in [
        (1, 1, 1),
        (13, 7, 33),
        (12, 256, 32),
        (24, 1, 40),
        (25, 257, 65),
        (97, 300, 31),
        (200, 64, 96),
    ] {
        let a = values(m * k, 1);
        let b = values(k * n, 2);
        let packed = pack(&b, (k, n), n, 0, isa);
        let mut c = vec![f32::NAN; m * n];
        gemm(
            m,
            &a,
            k,
            &packed,
            &mut c,
            Layout::rows(n),
            TileStore::default(),
        )
        .expect("gemm");
        let want = reference(m, k, n, &a, &b);
        assert_close(
            &widen(&c),
            &want,
            Tol::scaled(1e-4),
            &format!("{m}x{k}x{n}"),
        );
    }
}

/// Every kernel against the reference over a grid of shapes: sizes of 1, primes, sizes
/// just off each kernel's tile (6, 8, 12 rows; 16, 32 columns), no depth at all, and
/// depths over several depth blocks; on one thread and on two (whose shares split
/// tile rows and panels).
#[test]
fn matches_the_reference_on_a_grid_of_shapes() {
    for isa in kernels_here("matches_the_reference_on_a_grid_of_shapes") {
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("a thread pool");
            // Every remainder of 12 rows but 0 and 4 (in the shapes below) and of 6,
            // the kernels' tiles: 8 and 20 end on AVX-512's 8-row loop.
            for m in [1, 5, 7, 8, 9, 13, 14, 15, 20, 22, 67, 131] {
                for n in [1, 15, 17, 33, 97] {
                    for k in [0, 1, 3, 31, 257, 1031] {
                        grid_case(&pool, isa, (m, k, n));
                    }
                }
            }
            // Large enough to split over threads (`work` of 2^20 and more): by rows,
            // and (wide results whose rows stay in cache) by weight panels.
            for (m, k, n) in [
                (151, 1543, 67),
                (64, 2051, 96),
                (389, 129, 400),
                (128, 777, 70),
            ] {
                assert!(!splits_by_panels(m, k, n));
                grid_case(&pool, isa, (m, k, n));
            }
            for (m, k, n) in [(40, 300, 400), (30, 1031, 301), (13, 257, 997)] {
                assert!(splits_by_panels(m, k, n));
                grid_case(&pool, isa, (m, k, n));
            }
        }
    }
}

/// One product of [`matches_the_reference_on_a_grid_of_shapes`], with a bias, with
/// and without prefetching the next weight block; on AVX-512 in both of its forms
/// ([`Broadcast`]), which must agree bit for bit (the same sums in the same order).
fn grid_case(pool: &rayon::ThreadPool, isa: Isa, (m, k, n): (usize, usize, usize)) {
    let a = values(m * k, m + k);
    let b = values(k * n, k + n);
    let bias = values(n, n);
    let packed = pack(&b, (k, n), n, 0, isa);
    let mut want = reference(m, k, n, &a, &b);
    for (i, w) in want.iter_mut().enumerate() {
        *w += bias[i % n] as f64;
    }
    let forms: &[Broadcast] = match isa {
        Isa::Avx512 => &[Broadcast::InFma, Broadcast::InRegister],
        _ => &[Broadcast::InFma],
    };
    for prefetch in [false, true] {
        let mut first: Option<Vec<f32>> = None;
        for &broadcast in forms {
            let mut c = vec![f32::NAN; m * n];
            let store = TileStore {
                bias: Some(&bias),
                broadcast,
                ..TileStore::default()
            };
            pool.install(|| {
                let out = (Layout::rows(n), store);
                gemm_prefetching(m, (&a, k), &packed, &mut c, out, Some(prefetch))
            })
            .expect("gemm");
            let what = format!(
                "{isa:?} ({broadcast:?}) {m}x{k}x{n} at {} threads, prefetching {prefetch}",
                pool.current_num_threads()
            );
            assert_close(&widen(&c), &want, Tol::scaled(1e-4), &what);
            match &first {
                Some(f) => assert!(
                    f.iter().zip(&c).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{what}: the two broadcast forms disagree"
                ),
                None => first = Some(c),
            }
        }
    }
}

/// Rows 4 KiB apart (copied at a padded stride first), more rows than a row block,
/// several depth blocks, and thread counts whose shares end inside a tile row.
#[test]
fn aliased_rows_and_uneven_thread_shares_match_the_reference() {
    for isa in kernels_here("aliased_rows_and_uneven_thread_shares_match_the_reference") {
        aliased_rows_and_uneven_thread_shares_match_the_reference_on(isa);
    }
}

fn aliased_rows_and_uneven_thread_shares_match_the_reference_on(isa: Isa) {
    for threads in [1, 2, 3] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("a thread pool");
        // Aliased rows that stay in cache (copied whole) and more than do (1100 rows
        // of 4 KiB, copied a block at a time).
        for (m, k, n) in [
            (500, 1024, 40),
            (61, 2048, 70),
            (130, 1000, 96),
            (1100, 1024, 24),
        ] {
            assert_eq!(aliases(k), k % 1024 == 0);
            let a = values(m * k, 5);
            let b = values(k * n, 6);
            let packed = pack(&b, (k, n), n, 0, isa);
            let mut c = vec![f32::NAN; m * n];
            pool.install(|| {
                gemm(
                    m,
                    &a,
                    k,
                    &packed,
                    &mut c,
                    Layout::rows(n),
                    TileStore::default(),
                )
            })
            .expect("gemm");
            let want = reference(m, k, n, &a, &b);
            let what = format!(
                "{m}x{k}x{n} at {threads} threads, rows resident {}",
                resident_rows(m, k)
            );
            assert_close(&widen(&c), &want, Tol::scaled(1e-4), &what);
        }
    }
}

/// A result of `m` rows laid out in column blocks of `block` (head-major when `block`
/// is a head's width; row-major when it is every column).
fn column_blocks(m: usize, block: usize) -> Layout {
    Layout {
        ldc: block,
        block,
        block_stride: m * block,
    }
}

impl Layout {
    /// Where element `(i, j)` of the result lies.
    fn at(&self, i: usize, j: usize) -> usize {
        (j / self.block) * self.block_stride + i * self.ldc + j % self.block
    }
}

const ACCUMULATE: TileStore<'static, f32> = TileStore {
    accumulate: true,
    bias: None,
    residual: None,
    activation: None,
    broadcast: Broadcast::InFma,
};

/// The bias and a residual added as tiles are stored: one and two depth blocks, no
/// depth at all, ragged tiles, row-major and head-major results, onto the product,
/// onto what the result holds, or onto a residual.
#[test]
fn stores_tiles_with_a_bias_and_residual() {
    for isa in kernels_here("stores_tiles_with_a_bias_and_residual") {
        stores_tiles_with_a_bias_and_residual_on(isa);
    }
}

fn stores_tiles_with_a_bias_and_residual_on(isa: Isa) {
    let shapes = [
        (13, 7, 45, 45),
        (100, 800, 70, 70),
        (30, 0, 33, 33),
        (29, 64, 128, 64),
    ];
    for (accumulate, with_residual) in [(false, false), (true, false), (false, true)] {
        for (m, k, n, block) in shapes {
            let a = values(m * k, 7);
            let b = values(k * n, 8);
            let bias = values(n, 9);
            let packed = pack(&b, (k, n), n, 0, isa);
            let layout = column_blocks(m, block);
            let mut c = vec![0.25f32; m * n];
            let residual = values(m * n, 10);
            let store = TileStore {
                accumulate,
                bias: Some(&bias),
                residual: with_residual.then_some(&residual[..]),
                activation: None,
                // The store is the same in both forms; the residual's cases run the
                // other one.
                broadcast: if with_residual {
                    Broadcast::InRegister
                } else {
                    Broadcast::InFma
                },
            };
            gemm(m, &a, k, &packed, &mut c, layout, store).expect("gemm");
            let product = reference(m, k, n, &a, &b);
            let (mut got, mut want) = (Vec::new(), Vec::new());
            for i in 0..m {
                for j in 0..n {
                    let at = column_blocks(m, block).at(i, j);
                    let before = match (accumulate, with_residual) {
                        (true, _) => 0.25,
                        (_, true) => residual[at] as f64,
                        _ => 0.0,
                    };
                    got.push(c[at] as f64);
                    want.push(product[i * n + j] + bias[j] as f64 + before);
                }
            }
            let what = format!(
                "{m}x{k}x{n}, accumulate {accumulate}, residual {with_residual} (row-major)"
            );
            assert_close(&got, &want, Tol::scaled(1e-4), &what);
        }
    }
    // A bias shorter than the product's columns, a residual shorter than the
    // result, or a residual with `accumulate`, is refused.
    let packed = pack(&values(40, 1), (4, 10), 10, 0, isa);
    let mut c = vec![0.0; 20];
    let full = [0.0; 20];
    let refused = [
        TileStore {
            bias: Some(&[0.0; 9]),
            ..TileStore::default()
        },
        TileStore {
            residual: Some(&[0.0; 19]),
            ..TileStore::default()
        },
        TileStore {
            residual: Some(&full),
            accumulate: true,
            ..TileStore::default()
        },
    ];
    for store in refused {
        let a = values(8, 2);
        assert!(gemm(2, &a, 4, &packed, &mut c, Layout::rows(10), store).is_err());
    }
}

/// The activation applied once to each tile, after its last depth block (never to a
/// partial sum): one, two and four depth blocks, no depth at all, ragged tiles, rows
/// copied first (a depth of 1024 floats, 4 KiB apart), row-major and head-major
/// results, onto the product with a bias or onto what the result holds.
#[test]
fn activates_each_tile_after_its_last_depth_block() {
    use crate::cpu::matmul::Activation;
    let activations = [
        Activation::GeluTanh,
        Activation::Gelu,
        Activation::Silu,
        Activation::Relu,
    ];
    let shapes = [
        (13, 7, 45, 45),
        (100, 800, 70, 70),
        (30, 0, 33, 33),
        (29, 64, 128, 64),
        (40, 1024, 40, 40),
    ];
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .expect("pool");
    for isa in kernels_here("activates_each_tile_after_its_last_depth_block") {
        for act in activations {
            for accumulate in [false, true] {
                for (m, k, n, block) in shapes {
                    let a = values(m * k, 3);
                    // Small enough that the activations' curved parts are reached.
                    let b: Vec<f32> = values(k * n, 4).iter().map(|x| x * 0.1).collect();
                    let bias = values(n, 5);
                    let packed = pack(&b, (k, n), n, 0, isa);
                    let layout = column_blocks(m, block);
                    let mut c = vec![0.25f32; m * n];
                    let store = TileStore {
                        accumulate,
                        bias: (!accumulate).then_some(&bias[..]),
                        residual: None,
                        activation: Some((act, crate::elementwise::isa())),
                        broadcast: Broadcast::InFma,
                    };
                    pool.install(|| gemm(m, &a, k, &packed, &mut c, layout, store))
                        .expect("gemm");
                    let product = reference(m, k, n, &a, &b);
                    let (mut got, mut want) = (Vec::new(), Vec::new());
                    for i in 0..m {
                        for j in 0..n {
                            let at = column_blocks(m, block).at(i, j);
                            let before = if accumulate { 0.25 } else { bias[j] as f64 };
                            got.push(c[at] as f64);
                            want.push(act.apply(product[i * n + j] + before));
                        }
                    }
                    let what = format!("{isa:?} {act:?} {m}x{k}x{n}, accumulate {accumulate}");
                    assert_close(&got, &want, Tol::scaled(1e-4), &what);
                }
            }
        }
    }
}

#[test]
fn writes_head_blocks_and_accumulates() {
    for isa in kernels_here("writes_head_blocks_and_accumulates") {
        writes_head_blocks_and_accumulates_on(isa);
    }
}

fn writes_head_blocks_and_accumulates_on(isa: Isa) {
    // 29 rows stay in cache (panel by panel); 1320 rows of 800 depths do not (depth
    // block by depth block).
    assert!(resident_rows(29, 800) && !resident_rows(1320, 800));
    for m in [29, 1320] {
        head_blocks_case(isa, m);
    }
}

fn head_blocks_case(isa: Isa, m: usize) {
    // Columns 8..136 of a 140-column weight as 2 heads of 64, onto a result holding
    // 1.5 everywhere (accumulated), with 800 depths (two depth blocks).
    let (k, n_all, col0, d) = (800, 140, 8, 64);
    let a = values(m * k, 3);
    let b = values(k * n_all, 4);
    let packed = pack(&b, (k, 2 * d), n_all, col0, isa);
    let mut c = vec![1.5f32; 2 * m * d];
    let layout = Layout {
        ldc: d,
        block: d,
        block_stride: m * d,
    };
    gemm(m, &a, k, &packed, &mut c, layout, ACCUMULATE).expect("gemm");
    let part: Vec<f32> = (0..k)
        .flat_map(|p| b[p * n_all + col0..p * n_all + col0 + 2 * d].to_vec())
        .collect();
    let product = reference(m, k, 2 * d, &a, &part);
    let (mut got, mut want) = (Vec::new(), Vec::new());
    for i in 0..m {
        for j in 0..2 * d {
            got.push(c[(j / d) * m * d + i * d + j % d] as f64);
            want.push(product[i * 2 * d + j] + 1.5);
        }
    }
    assert_close(&got, &want, Tol::scaled(1e-4), "head blocks (row-major)");
    // Blocks that are not a multiple of the panel width are refused.
    let bad = Layout {
        ldc: 48,
        block: 48,
        block_stride: m * 48,
    };
    assert!(gemm(m, &a, k, &packed, &mut c, bad, TileStore::default()).is_err());
}

#[test]
fn row_blocks_are_even_whole_tiles_within_the_limit() {
    // (rows, limit, tile rows) -> rows per block
    for ((rows, mc, mr), want) in [
        ((256, 240, 6), 132),
        ((240, 240, 6), 240),
        ((241, 240, 6), 126),
        ((5, 240, 6), 6),
        ((0, 240, 6), 6),
        ((1000, 480, 12), 336),
    ] {
        let got = even_row_block(rows, mc, mr);
        assert_eq!(got, want, "{rows} rows, at most {mc}, tiles of {mr}");
        assert!(got.is_multiple_of(mr) && got <= mc);
        assert!(rows.div_ceil(got) == rows.div_ceil(mc).max(1) || rows == 0);
    }
}

/// The transpose of `bt` (`rows x cols`, row-major): `cols x rows`.
fn transpose(bt: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut b = vec![0f32; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            b[c * rows + r] = bt[r * cols + c];
        }
    }
    b
}

/// Packing from the transposed storage (`[N, K]`) gives the very panels that packing
/// the transposed matrix does, for partial panels, depths over several copy blocks and
/// column ranges, on every kernel the CPU has; each panel's rows are reported done once,
/// in order, and the product matches the reference.
#[test]
fn packs_from_transposed_storage() {
    for isa in kernels_here("packs_from_transposed_storage") {
        for (m, k, n_all, col0, n) in [
            (1, 1, 1, 0, 1),
            (13, 7, 33, 0, 33),
            (25, 257, 65, 0, 65),
            (20, 130, 100, 17, 50),
            (64, 64, 96, 32, 64),
            (3, 300, 47, 46, 1),
        ] {
            let bt = values(n_all * k, 3);
            let b = transpose(&bt, n_all, k);
            let plain = pack(&b, (k, n), n_all, col0, isa);
            let mut done = Vec::new();
            let packed =
                PackedB::pack_transposed_by_columns(&bt, (k, n), k, col0, isa, &mut |cols| {
                    done.push(cols)
                })
                .expect("a kernel with a packed form");
            let case = format!("{isa:?} {m}x{k}x{n} from column {col0} of {n_all}");
            let nr = panel_width(isa).expect("a panel width");
            // The panels (past them, the alignment's slack, which depends on the
            // allocation).
            let len = n.div_ceil(nr) * nr * k;
            assert_eq!(packed.panels()[..len], plain.panels()[..len], "{case}");
            assert_eq!((packed.k(), packed.isa()), (k, isa), "{case}");
            let want: Vec<_> = (0..n.div_ceil(nr))
                .map(|q| col0 + q * nr..col0 + n.min((q + 1) * nr))
                .collect();
            assert_eq!(done, want, "{case}");
            let a = values(m * k, 4);
            let mut c = vec![f32::NAN; m * n];
            gemm(
                m,
                &a,
                k,
                &packed,
                &mut c,
                Layout::rows(n),
                TileStore::default(),
            )
            .expect("gemm");
            let cols: Vec<f32> = (0..k)
                .flat_map(|p| b[p * n_all + col0..p * n_all + col0 + n].to_vec())
                .collect();
            assert_close(
                &widen(&c),
                &reference(m, k, n, &a, &cols),
                Tol::scaled(1e-4),
                &case,
            );
        }
    }
}

/// The tiles' in-loop prefetch streams cover the next block once, tile after tile: each
/// starts where the one before stops, and the tiles past its end get none.
#[test]
fn in_loop_shares_tile_the_next_block() {
    for (len, kc) in [(768 * 32, 768), (100 * 32, 100), (7 * 32, 7), (3 * 32, 3)] {
        let block = vec![0f32; len];
        let per_tile = kc / 4 * super::IN_LOOP_FLOATS;
        let starts: Vec<usize> = (0..64)
            .map_while(|t| super::in_loop_share(&block, t, kc))
            .map(|p| (p as usize - block.as_ptr() as usize) / 4)
            .collect();
        if per_tile == 0 {
            // Fewer than four depths: the loops never prefetch.
            assert!(starts.is_empty(), "kc {kc}");
            continue;
        }
        let want: Vec<usize> = (0..len.div_ceil(per_tile)).map(|t| t * per_tile).collect();
        assert_eq!(starts, want, "kc {kc}");
    }
}

//! # 9. Rules that check themselves
//!
//! A rule says two graphs compute the same thing. Every rule of a
//! [`rule_set!`](crate::rule_set) is tested for that without a test written for it: the
//! macro emits, under your crate's `cfg(test)`, a test `verify_<rule>` in the rule's
//! module, and `cargo test` runs it. The test ([`selfcheck`](crate::selfcheck)) builds
//! small random graphs the rule's pattern matches, rewrites each with that rule alone,
//! runs both graphs with the reference executor on the same random inputs, and compares
//! every output element with the NaN-safe comparison of
//! [`graphrw::kernels::testing::compare`](crate::kernels::testing::compare) (a NaN must
//! stay a NaN, an infinity the same infinity, finite values within
//! `tol * (1 + |before|)`; `tol` is 1e-4 for f32, 1e-9 for f64).
//!
//! The graphs come from the compiled pattern itself: a graph input per tensor parameter
//! (sometimes a one-number constant instead, which a tensor parameter also binds),
//! drawn values for scalar parameters and free attributes (axes within the rank,
//! permutations, reshape targets that keep the element count), shapes that fit the
//! ops (an operand beside another takes its shape, sometimes with dims of 1 to
//! broadcast; a `matmul`'s right operand continues the left one's inner dim), and
//! `rank(x) == N` and `dtype(x) == T` met directly. Every alternative `a | b` is taken,
//! every optional part present and absent, every repeated chain one to three times: the
//! check keeps drawing until each choice was taken by a compared graph. What the
//! generator cannot aim at (a `check(..)` closure, `s != 0.0`) is met by rejection: a
//! graph the pattern refuses is drawn again, at most 100 times per graph wanted.
//!
//! ```
//! use graphrw::rule_set;
//! use graphrw::selfcheck::{check_rule, Config, Failure};
//!
//! rule_set! {
//!     static ALGEBRA;
//!
//!     rule div_to_mul(x: Tensor, s: f64) -> Tensor where s != 0.0 {
//!         x.div(s)
//!     } => {
//!         x.mul(1.0 / s)?
//!     }
//!
//!     // Wrong: the scale should be 2.
//!     rule double(x: Tensor) -> Tensor {
//!         x.add(x)
//!     } => {
//!         x.mul(0.5)?
//!     }
//! }
//!
//! // What `verify_div_to_mul` runs (`Config::from_env()` there).
//! let report = check_rule(ALGEBRA.rule("div_to_mul").unwrap(), &Config::default()).unwrap();
//! assert_eq!(report.graphs, 8);
//! assert!(report.max_error < 1e-4);
//! // rule `div_to_mul` (src/lib.rs:9): 8 graphs rewritten and compared (..), largest error ..
//! println!("{report}");
//!
//! // What fails `verify_double`, with the rule's line and a counterexample.
//! let failure = check_rule(ALGEBRA.rule("double").unwrap(), &Config::default()).unwrap_err();
//! let text = failure.to_string();
//! assert!(matches!(failure, Failure::Mismatch { .. }), "{text}");
//! assert!(text.contains("rule `double` (") && text.contains("is wrong"), "{text}");
//! println!("{text}");
//! ```
//!
//! A failure reads like this one, of a rule `wrong_scale` (`x / s` to `x * s`;
//! `cargo test` shows it as the test's panic). The counterexample is the smallest of
//! the failing graphs found (by input elements, among 64 more drawn after the first):
//!
//! ```text
//! rule `wrong_scale` (graphrw/src/selfcheck/tests.rs:17) is wrong: output 0 (f32 [1])
//! differs after the rewrite: element 0: -1.4564566612243652 vs -1.4770632982254028
//! (difference 0.020606637001037598, allowed 0.0002477063298225403)
//! inputs: x: f32 [1] (seed 15180835470052759825)
//! before:
//! graph(x: f32[1]) {
//!   c0 = constant(-0.993)  # f32[]
//!   t0 = div(x, c0)  # f32[1]
//!   return t0
//! }
//! after:
//! graph(x: f32[1]) {
//!   c0 = constant(-0.993)  # f32[]
//!   t0 = mul(x, c0)  # f32[1]
//!   return t0
//! }
//! ```
//!
//! ## Tuning: `#[verify(..)]`
//!
//! - `#[verify(skip = "why")]`: no test; the reason stays on the rule
//!   ([`Rule::verify`](crate::Rule::verify)), and the report says it. On the set
//!   (`#[verify(skip = "..")] static SET;`) it skips every rule of the set (fixtures of
//!   tests that are wrong on purpose).
//! - `#[verify(graphs = N)]`: compare `N` graphs (default 8; `GRAPHRW_VERIFY_GRAPHS=N`
//!   raises it for every rule for a longer run, `GRAPHRW_VERIFY_SEED=S` draws others).
//! - `#[verify(tol = 3e-2)]`: a rule that knowingly changes the rounding.
//! - `#[verify(generator = path)]`: the rule's own generator, a
//!   [`GenFn`](crate::pattern::GenFn) (`fn(u64) -> Result<Option<Graph>, GraphError>`,
//!   given a seed; [`selfcheck::Rng`](crate::selfcheck::Rng) draws from it), for a
//!   constraint rejection cannot meet, or for inputs of the kind the rule is exact on.
//!   The path is written as from the `rule_set!`'s module.
//!
//! A generator that cannot find a graph the pattern matches is reported, not panicked
//! on: "could not generate a graph it matches (.. drawn); the last was refused: ..",
//! followed by why the pattern refused it, which names the constraint that failed (or
//! the alternative no graph took). A match whose
//! replacement fails is rolled back by the rewriter (the graph is left as it was), so
//! it is counted in the report, not failed.
//!
//! ```
//! use graphrw::rule_set;
//! use graphrw::selfcheck::{check_rule, Config, Rng};
//! use graphrw::{Builder, DType, Graph, GraphError, TensorMeta};
//!
//! /// `x.reshape([n]).reshape(shape of x)` for a random `x`: rejection would need to
//! /// guess both targets.
//! fn flat_and_back(seed: u64) -> Result<Option<Graph>, GraphError> {
//!     let mut rng = Rng::new(seed);
//!     let dims = [rng.range(1, 4), rng.range(1, 4)];
//!     let g = Builder::new();
//!     let x = g.input("x", TensorMeta::new(DType::F32, dims.map(|d| d as usize)));
//!     let y = x.reshape(&[dims[0] * dims[1]])?.reshape(&dims)?;
//!     g.output(&[y])?;
//!     Ok(Some(g.finish()))
//! }
//!
//! rule_set! {
//!     static LAYOUT;
//!
//!     #[verify(generator = flat_and_back)]
//!     rule reshape_back(x: Tensor, a: Vec<i64>, b: Vec<i64>) -> Tensor
//!     where check(|x, b| x.meta().shape.as_known().is_some_and(|s| s.iter().map(|&d| d as i64).eq(b.iter().copied())))
//!     {
//!         x.reshape(a).reshape(b)
//!     } => {
//!         x
//!     }
//! }
//!
//! fn main() {
//!     let report = check_rule(LAYOUT.rule("reshape_back").unwrap(), &Config::default()).unwrap();
//!     assert_eq!((report.graphs, report.rejected), (8, 0));
//! }
//! ```
//!
//! ## The built-in rules
//!
//! Every rule of the built-in library is verified by `cargo test -p graphrw`: the 32
//! of [`CANONICAL`](crate::rules::CANONICAL), the 5 of
//! [`ATTENTION`](crate::rules::ATTENTION), the 9 of
//! [`NORM_SPELLINGS`](crate::rules::NORM_SPELLINGS) and
//! [`UNWEIGHTED_RMS_NORM`](crate::rules::UNWEIGHTED_RMS_NORM), and the rules of every
//! built-in fused kernel ([`generated::builtin`](crate::generated::builtin), checked
//! against the generated CPU kernel). None is skipped. Some state a generator or a
//! tolerance, and why:
//!
//! | rule | what | why |
//! |---|---|---|
//! | `masked_fill_before_softmax`, `where_keep_before_softmax`, `where_hide_before_softmax` | generator: the mask a constant keeping key 0 of every row | exact on every row with a visible key; a row with none is the documented exception ([`rules::attention`](crate::rules::attention)) |
//! | `reshape_transpose_reshape`, `reshape_transpose_reshape_symbolic` | generator: the 3-D view that swaps the last two dims | rejection would have to guess two reshape targets |
//! | the four `grouped_kv_heads*` | generator: `repeat_kv` as transformers writes it | the `unsqueeze`/`expand`/`reshape` chain must repeat the heads exactly |
//! | `softmax_in_other_precision` | `tol = 3e-2` | computing in `x`'s own precision removes a bf16 or f16 rounding on purpose |
//!
//! [`rules::causal`](crate::rules::causal) is a pass, not rules (it evaluates mask
//! parts instead of matching one pattern per spelling), so it has no `verify_` test of
//! its own: its differential test builds attention nodes with the triangle's spellings
//! and compares the graph before and after
//! [`mark_causal`](crate::rules::causal::mark_causal) the same way
//! ([`selfcheck::check_pass`](crate::selfcheck::check_pass)).
//!
//! ```
//! use graphrw::{generated, rules};
//!
//! let mut sets = vec![
//!     &rules::CANONICAL,
//!     &rules::ATTENTION,
//!     &rules::NORM_SPELLINGS,
//!     &rules::UNWEIGHTED_RMS_NORM,
//! ];
//! sets.extend(generated::builtin::ALL.iter().map(|k| k.rules));
//! let skipped: Vec<_> = sets
//!     .iter()
//!     .flat_map(|s| s.rules.iter())
//!     .filter(|r| r.verify.skip.is_some())
//!     .map(|r| r.name)
//!     .collect();
//! assert!(skipped.is_empty(), "{skipped:?}");
//! ```
//!
//! ## What it does not do
//!
//! - The shapes are small (dims 1 to 5, ranks 1 to 4) and the dtypes f32 and f64 (a
//!   `cast` target may be f16 or bf16): a rule wrong only at large sizes or in half
//!   precision arithmetic is not caught by default. `GRAPHRW_VERIFY_HALF=1` adds f16
//!   and bf16 graphs, for exploring: it found that `div_by_scalar` turned `x / 1e-5`
//!   into `x * 1e5`, infinite in f16 (now refused), but there the fused norm kernels,
//!   which round once, disagree with their decomposition, which rounds at every op (its
//!   variance can underflow to an infinite `rsqrt`), past any useful bound.
//! - Symbolic dims are not generated: the graphs have known shapes.
//! - A `rule_set!` written inside a function body gets no test (Rust runs no test
//!   nested in a function); call [`check_rule`](crate::selfcheck::check_rule) there.
//!
//! Next: back to [the guide](super).

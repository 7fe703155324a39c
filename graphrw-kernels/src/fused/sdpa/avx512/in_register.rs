//! The depth loops of the micro-kernels in their second form
//! ([`Broadcast::InRegister`](crate::cpu::Broadcast::InRegister)), in `asm`: each of the
//! 8 rows' elements of a step is broadcast into `zmm31` once and read by all `W` of its
//! FMAs (or bf16 dot products), whatever the compiler would do with the intrinsics
//! loops (an embedded `{1to16}` broadcast in every FMA loads the element `W` times: a
//! core with two 512-bit FMA ports and two load ports waits on those loads, one that
//! runs one 512-bit FMA a cycle does not). rustc 1.95 embeds the broadcast only in the
//! one-vector loops, so on the Intel Xeon family 6 model 167 the two forms measure
//! level in f32 (within 2-4%, either way, one thread) and this one 3-10% faster on the
//! BF16 dot products. Both forms do the same operations on each accumulator in the
//! same order, so their results are the same bits; which one runs is measured on the
//! CPU (`choice.rs`).
//!
//! One loop serves both products and both dtypes: `n` steps, each reading `W` vectors
//! at `b + w bs` (then `b` moves 64 bytes on) and 8 consecutive 32-bit elements at `a`
//! (then `a` moves `sa` bytes on): the scores read key panels (`a`, 32 bytes a step)
//! against query panels (`b`), the values probability rows (`a`, a row of the
//! probabilities a step) against value panels (`b`). f32 runs `vfmadd231ps`, bf16 pairs
//! `vdpbf16ps`. The vectors and the broadcast are named registers (`zmm28` to `zmm31`):
//! built without optimisation, rustc found no register for allocated operands beyond
//! the 24 accumulators (as in `cpu::packed_gemm::avx512`).

use std::arch::x86_64::*;

use super::MR;

/// The loads of one step: each vector register `$reg` from `[$addr + $bd]`.
macro_rules! loads {
    ($bd:literal, [$($reg:literal $addr:literal),*]) => {
        concat!($("vmovups ", $reg, ", [", $addr, " + ", $bd, "]\n",)*)
    };
}

/// The 8 rows of one step: row `r`'s element at `[$a + $d]` broadcast into `zmm31`,
/// then `$op` of each of its accumulators `$c` with the vector register `$v`.
macro_rules! rows {
    ($op:literal, $a:literal, [$($d:literal: [$($c:ident $v:literal),*]),*]) => {
        concat!($(
            "vbroadcastss zmm31, dword ptr [", $a, " + ", $d, "]\n",
            $($op, " {", stringify!($c), "}, ", $v, ", zmm31\n",)*
        )*)
    };
}

/// Defines `$name`: `n` steps of `$op` over `W` vectors (`$loads`) and 8 rows
/// (`$rows`, accumulators named as in the pattern of `acc`), two steps a pass.
macro_rules! depth_loop_fn {
    (
        $(#[$attr:meta])* $name:ident, $op:literal, $w:literal,
        $loads:tt, $rows:tt, [$([$($c:ident $v:literal),*]),*], $($vreg:tt)*
    ) => {
        $(#[$attr])*
        #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
        pub(super) unsafe fn $name(
            n: usize,
            (a, sa): (*const u8, usize),
            (b, bs): (*const u8, usize),
            acc: &mut [[__m512; $w]; MR],
        ) {
            let [$([$($c),*]),*] = acc;
            // SAFETY: the caller's contract: `n` steps read `W` vectors at `b + w bs +
            // 64 i` and 8 elements at `a + i sa`, `i < n`. Only the named registers and
            // flags are written.
            unsafe {
                std::arch::asm!(
                    // (Named in every width, used from two vectors on.)
                    "/* vectors {bs} bytes apart */",
                    "cmp {n}, 2",
                    "jb 3f",
                    "2:",
                    loads!("0", $loads),
                    rows!($op, "{a}", $rows),
                    loads!("64", $loads),
                    rows!($op, "{a} + {sa}", $rows),
                    "lea {a}, [{a} + {sa} * 2]",
                    "add {b}, 128",
                    "sub {n}, 2",
                    "cmp {n}, 2",
                    "jae 2b",
                    "3:",
                    "test {n}, {n}",
                    "jz 4f",
                    loads!("0", $loads),
                    rows!($op, "{a}", $rows),
                    "4:",
                    n = inout(reg) n => _,
                    a = inout(reg) a => _,
                    sa = in(reg) sa,
                    b = inout(reg) b => _,
                    bs = in(reg) bs,
                    $($($c = inout(zmm_reg) *$c,)*)*
                    $(out($vreg) _,)*
                    out("zmm31") _,
                    options(nostack, readonly),
                );
            }
        }
    };
}

/// Generates the three widths of one operation.
macro_rules! depth_loops {
    ($op:literal, $one:ident, $two:ident, $three:ident) => {
        depth_loop_fn!(
            /// The register-broadcast depth loop, one vector wide (see the module docs).
            ///
            /// # Safety
            /// The features of `super::available`; `a` readable for 8 32-bit elements at
            /// `a + i sa` and `b` for 64 bytes at `b + 64 i`, for every step `i < n`.
            $one, $op, 1,
            ["zmm28" "{b}"],
            [
                "0": [c0 "zmm28"], "4": [c1 "zmm28"], "8": [c2 "zmm28"], "12": [c3 "zmm28"],
                "16": [c4 "zmm28"], "20": [c5 "zmm28"], "24": [c6 "zmm28"], "28": [c7 "zmm28"]
            ],
            [[c0 "zmm28"], [c1 "zmm28"], [c2 "zmm28"], [c3 "zmm28"],
             [c4 "zmm28"], [c5 "zmm28"], [c6 "zmm28"], [c7 "zmm28"]],
            "zmm28"
        );
        depth_loop_fn!(
            /// The register-broadcast depth loop, two vectors wide (see the module docs).
            ///
            /// # Safety
            /// As the one-vector loop, with 64 bytes also at `b + bs + 64 i`.
            $two, $op, 2,
            ["zmm28" "{b}", "zmm29" "{b} + {bs}"],
            [
                "0": [c00 "zmm28", c01 "zmm29"], "4": [c10 "zmm28", c11 "zmm29"],
                "8": [c20 "zmm28", c21 "zmm29"], "12": [c30 "zmm28", c31 "zmm29"],
                "16": [c40 "zmm28", c41 "zmm29"], "20": [c50 "zmm28", c51 "zmm29"],
                "24": [c60 "zmm28", c61 "zmm29"], "28": [c70 "zmm28", c71 "zmm29"]
            ],
            [[c00 "zmm28", c01 "zmm29"], [c10 "zmm28", c11 "zmm29"],
             [c20 "zmm28", c21 "zmm29"], [c30 "zmm28", c31 "zmm29"],
             [c40 "zmm28", c41 "zmm29"], [c50 "zmm28", c51 "zmm29"],
             [c60 "zmm28", c61 "zmm29"], [c70 "zmm28", c71 "zmm29"]],
            "zmm28" "zmm29"
        );
        depth_loop_fn!(
            /// The register-broadcast depth loop, three vectors wide (see the module
            /// docs).
            ///
            /// # Safety
            /// As the one-vector loop, with 64 bytes also at `b + w bs + 64 i`, `w < 3`.
            $three, $op, 3,
            ["zmm28" "{b}", "zmm29" "{b} + {bs}", "zmm30" "{b} + {bs} * 2"],
            [
                "0": [c00 "zmm28", c01 "zmm29", c02 "zmm30"],
                "4": [c10 "zmm28", c11 "zmm29", c12 "zmm30"],
                "8": [c20 "zmm28", c21 "zmm29", c22 "zmm30"],
                "12": [c30 "zmm28", c31 "zmm29", c32 "zmm30"],
                "16": [c40 "zmm28", c41 "zmm29", c42 "zmm30"],
                "20": [c50 "zmm28", c51 "zmm29", c52 "zmm30"],
                "24": [c60 "zmm28", c61 "zmm29", c62 "zmm30"],
                "28": [c70 "zmm28", c71 "zmm29", c72 "zmm30"]
            ],
            [[c00 "zmm28", c01 "zmm29", c02 "zmm30"], [c10 "zmm28", c11 "zmm29", c12 "zmm30"],
             [c20 "zmm28", c21 "zmm29", c22 "zmm30"], [c30 "zmm28", c31 "zmm29", c32 "zmm30"],
             [c40 "zmm28", c41 "zmm29", c42 "zmm30"], [c50 "zmm28", c51 "zmm29", c52 "zmm30"],
             [c60 "zmm28", c61 "zmm29", c62 "zmm30"], [c70 "zmm28", c71 "zmm29", c72 "zmm30"]],
            "zmm28" "zmm29" "zmm30"
        );
    };
}

depth_loops!("vfmadd231ps", fma_w1, fma_w2, fma_w3);
depth_loops!("vdpbf16ps", dpbf16_w1, dpbf16_w2, dpbf16_w3);

/// `n` f32 FMA steps on `acc` (`W` of 1 to 3), in the register-broadcast form: `acc[r][w]
/// += a[i][r] * b[w][i]` in step order, with `a[i]` the 8 floats at `a + i sa` bytes and
/// `b[w][i]` the 16 at `b + w bs + 64 i` bytes.
///
/// # Safety
/// The features of `super::available`; those reads in bounds for every `i < n`.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[inline]
pub(super) unsafe fn fma_steps<const W: usize>(
    n: usize,
    a: (*const u8, usize),
    b: (*const u8, usize),
    acc: &mut [[__m512; W]; MR],
) {
    // SAFETY (each arm): the caller's contract; the casts only restate `W`.
    unsafe {
        match W {
            1 => fma_w1(n, a, b, &mut *(acc as *mut _ as *mut [[__m512; 1]; MR])),
            2 => fma_w2(n, a, b, &mut *(acc as *mut _ as *mut [[__m512; 2]; MR])),
            3 => fma_w3(n, a, b, &mut *(acc as *mut _ as *mut [[__m512; 3]; MR])),
            _ => unreachable!("micro-tiles are 1 to 3 vectors wide"),
        }
    }
}

/// [`fma_steps`] with bf16 pairs: `acc[r][w]` gains the dot product of each 32-bit lane's
/// pair (`vdpbf16ps`), `a[i][r]` a pair broadcast to every lane.
///
/// # Safety
/// As [`fma_steps`].
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[inline]
pub(super) unsafe fn dpbf16_steps<const W: usize>(
    n: usize,
    a: (*const u8, usize),
    b: (*const u8, usize),
    acc: &mut [[__m512; W]; MR],
) {
    // SAFETY (each arm): the caller's contract; the casts only restate `W`.
    unsafe {
        match W {
            1 => dpbf16_w1(n, a, b, &mut *(acc as *mut _ as *mut [[__m512; 1]; MR])),
            2 => dpbf16_w2(n, a, b, &mut *(acc as *mut _ as *mut [[__m512; 2]; MR])),
            3 => dpbf16_w3(n, a, b, &mut *(acc as *mut _ as *mut [[__m512; 3]; MR])),
            _ => unreachable!("micro-tiles are 1 to 3 vectors wide"),
        }
    }
}

//! The AVX-512 micro-kernel of the packed GEMM: a `12 x 32` tile whose 24 accumulators
//! stay in `zmm` registers; each depth step loads two weight vectors and broadcasts one
//! element of each of its 12 rows. Full tiles and tiles of 8 rows run a loop in `asm`;
//! other row counts an intrinsics loop over their own rows.
//!
//! The `asm` loops come in two forms ([`Broadcast`]), the same instructions' results
//! in the same order: each row's element broadcast inside both of its FMAs (one load per
//! FMA, the fewest instructions), or broadcast into a register once and used by both
//! FMAs (half the loads). A core with two 512-bit FMA ports and two load ports (Intel's
//! server cores) waits on its loads in the first form; one that runs a 512-bit FMA a
//! cycle (Zen 4) does not. Which one runs is measured on the CPU ([`crate::cpu::choice`]).

use std::arch::x86_64::*;

use super::Kernel;

/// Rows per micro-tile.
const MR: usize = 12;
/// Columns per micro-tile and per packed weight panel (two 16-lane vectors).
const NR: usize = 32;

/// The AVX-512F kernel; with `IN_REGISTER`, its `asm` loops broadcast each row's
/// element into a register once per depth step ([`Broadcast::InRegister`]).
pub(crate) struct Avx512<const IN_REGISTER: bool>;

impl<const IN_REGISTER: bool> Kernel for Avx512<IN_REGISTER> {
    const MR: usize = MR;
    const NR: usize = NR;
    /// Measured: 256, 384 and 512 were slower on the module's shapes (Zen 4).
    const KC: usize = 768;
    const MC: usize = 480;
    /// Measured with the weight from memory (`gemm_rate --cold 4`, 2 threads, six
    /// alternated runs) on a 2-vCPU Intel Xeon (family 6 model 167), against the burst
    /// before each tile: GPT-2's LM head `128 x 768 x 50257` 33-41 ms against 44-49,
    /// `128 x 2048 x 5632` 9.6-10.8 against 12.1-13.1, `128 x 3072 x 768` 1.9-2.1
    /// against 2.0-2.4, `512 x 768 x 3072` level.
    const PREFETCH_IN_LOOP: bool = true;

    unsafe fn tile(
        kc: usize,
        a: (*const f32, usize),
        bp: (*const f32, *const f32),
        add: (*const f32, *const f32),
        c: (*mut f32, usize),
        hw: (usize, usize),
    ) {
        // SAFETY: the caller keeps [`Kernel::tile`]'s contract, which is `tile`'s.
        unsafe { tile::<IN_REGISTER>(kc, a, bp, add, c, hw) }
    }
}

/// [`Kernel::tile`] for [`Avx512`], its `asm` loops broadcasting into a register with
/// `IN_REGISTER`.
///
/// # Safety
/// AVX-512F; `a` readable for `h` rows of `kc` floats at stride `lda`, `bp` for `NR kc`,
/// `bias` (when not null) for `w` floats, `add_from` (when not null) for `h` rows of
/// `w` floats at stride `ldc`; `c` writable for `1 <= h <= MR` rows of `w <= NR`
/// floats at stride `ldc`.
#[target_feature(enable = "avx512f")]
unsafe fn tile<const IN_REGISTER: bool>(
    kc: usize,
    (a, lda): (*const f32, usize),
    (bp, pf): (*const f32, *const f32),
    (bias, add_from): (*const f32, *const f32),
    (c, ldc): (*mut f32, usize),
    (h, w): (usize, usize),
) {
    if !add_from.is_null() {
        for r in 0..h {
            // SAFETY: a prefetch reads nothing; the addresses are the tile's rows.
            unsafe {
                let at = add_from.add(r * ldc) as *const i8;
                _mm_prefetch::<_MM_HINT_T0>(at);
                _mm_prefetch::<_MM_HINT_T0>(at.add(64));
            }
        }
    }
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    if h == MR && kc > 0 {
        // SAFETY: all `MR` rows hold `kc` floats at stride `lda`, `bp` holds `NR kc`
        // (the function's contract).
        unsafe {
            if IN_REGISTER {
                full_tile_steps_in_register(kc, (a, lda), (bp, pf), &mut acc)
            } else {
                full_tile_steps_in_fma(kc, (a, lda), (bp, pf), &mut acc)
            }
        };
    } else if h == 8 && kc > 0 {
        let [eight @ .., _, _, _, _] = &mut acc;
        // SAFETY: the 8 rows hold `kc` floats at stride `lda`, `bp` holds `NR kc`
        // (the function's contract).
        unsafe {
            if IN_REGISTER {
                eight_row_steps_in_register(kc, (a, lda), (bp, pf), eight)
            } else {
                eight_row_steps_in_fma(kc, (a, lda), (bp, pf), eight)
            }
        };
    } else {
        // These loops do not prefetch: the tile's share of the next block, in a burst.
        if pf != bp {
            for line in 0..kc / 4 {
                // A prefetch reads nothing architecturally (safe in a function with the
                // feature enabled).
                _mm_prefetch::<_MM_HINT_T0>(pf.wrapping_add(16 * line).cast());
            }
        }
        // SAFETY (each arm): `h` rows of `kc` floats at stride `lda` from `a`, `NR kc`
        // floats at `bp` (the function's contract).
        unsafe {
            match h {
                11 => steps::<11>(kc, (a, lda), bp, &mut acc),
                10 => steps::<10>(kc, (a, lda), bp, &mut acc),
                9 => steps::<9>(kc, (a, lda), bp, &mut acc),
                8 => steps::<8>(kc, (a, lda), bp, &mut acc),
                7 => steps::<7>(kc, (a, lda), bp, &mut acc),
                6 => steps::<6>(kc, (a, lda), bp, &mut acc),
                5 => steps::<5>(kc, (a, lda), bp, &mut acc),
                4 => steps::<4>(kc, (a, lda), bp, &mut acc),
                3 => steps::<3>(kc, (a, lda), bp, &mut acc),
                2 => steps::<2>(kc, (a, lda), bp, &mut acc),
                _ => steps::<1>(kc, (a, lda), bp, &mut acc),
            }
        }
    }
    let mask = |v: usize| -> __mmask16 {
        let cols = w.saturating_sub(16 * v).min(16);
        ((1u32 << cols) - 1) as __mmask16
    };
    let masks = [mask(0), mask(1)];
    if !bias.is_null() {
        for (v, &m) in masks.iter().enumerate() {
            // SAFETY: `bias` holds the tile's `w` values; lanes past `w` are masked.
            let add = unsafe { _mm512_maskz_loadu_ps(m, bias.add(16 * v)) };
            for accr in acc.iter_mut().take(h) {
                accr[v] = _mm512_add_ps(accr[v], add);
            }
        }
    }
    for (r, accr) in acc.iter().enumerate().take(h) {
        for (v, &m) in masks.iter().enumerate() {
            if m == 0 {
                continue;
            }
            // SAFETY: row `r < h`, columns `16 v..` under mask `m` (`< w`): inside
            // the tile the caller gave.
            unsafe {
                let mut x = accr[v];
                if !add_from.is_null() {
                    let from = add_from.add(r * ldc + 16 * v);
                    x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, from));
                }
                _mm512_mask_storeu_ps(c.add(r * ldc + 16 * v), m, x);
            }
        }
    }
}

/// The FMAs of one depth step of some rows (each row's element at `[$addr]`, a row
/// pointer plus a row offset such as `{s}` plus the step's byte offset), on the
/// weight vectors in `b0` and `b1`; accumulators `$c0` and `$c1`. Each row's element
/// is broadcast inside its FMA ([`Broadcast::InFma`]).
macro_rules! fma_rows {
    ($( $c0:literal $c1:literal [$($addr:tt)*] ),* $(,)?) => {
        concat!($(
            "vfmadd231ps {", $c0, "}, {b0}, dword ptr [", $($addr)*, "]{{1to16}}\n",
            "vfmadd231ps {", $c1, "}, {b1}, dword ptr [", $($addr)*, "]{{1to16}}\n",
        )*)
    };
}

/// [`fma_rows`] with each row's element broadcast into `zmm31` first (named, not an
/// allocated operand: built without optimisation, rustc found no register for one), then read
/// by both FMAs ([`Broadcast::InRegister`]).
macro_rules! fma_rows_in_register {
    ($( $c0:literal $c1:literal [$($addr:tt)*] ),* $(,)?) => {
        concat!($(
            "vbroadcastss zmm31, dword ptr [", $($addr)*, "]\n",
            "vfmadd231ps {", $c0, "}, {b0}, zmm31\n",
            "vfmadd231ps {", $c1, "}, {b1}, zmm31\n",
        )*)
    };
}

/// One depth step of rows 0 to 7 at byte offset `$d` of the rows and `$b` of the
/// weight panel: the two weight vectors loaded into `b0`, `b1`, then the FMAs of
/// `$fma` ([`fma_rows`] or [`fma_rows_in_register`]; row `3 g + r` read at
/// `a{3g} + r s`).
macro_rules! eight_rows_step {
    ($fma:ident, $d:literal, $b:literal) => {
        concat!(
            "vmovups {b0}, [{bp} + ", $b, "]\n",
            "vmovups {b1}, [{bp} + ", $b, " + 64]\n",
            $fma!(
                "c00" "c01" ["{a0} + ", $d],
                "c10" "c11" ["{a0} + {s} + ", $d],
                "c20" "c21" ["{a0} + {s} * 2 + ", $d],
                "c30" "c31" ["{a3} + ", $d],
                "c40" "c41" ["{a3} + {s} + ", $d],
                "c50" "c51" ["{a3} + {s} * 2 + ", $d],
                "c60" "c61" ["{a6} + ", $d],
                "c70" "c71" ["{a6} + {s} + ", $d],
            ),
        )
    };
}

/// Prefetches the 512 bytes of the weight panel 4 KiB past `{bp}` (8 cache lines: the
/// four depth steps one pass of a loop reads, 32 steps ahead). A tile of few rows
/// spends little time per depth step, so the panel streaming from memory stalls it
/// unless its lines are asked for well ahead. Measured with the weight from DRAM
/// (`gemm_rate --cold 20`, 2 threads, three alternating runs) on a 2-vCPU Intel Xeon
/// (family 6 model 167): `16 x 2048 x 2048` 52-65 -> 84-118 GFLOP/s, `16 x 2048 x 5632`
/// 53-96 -> 82-101, `128 x 2048 x 5632` level.
macro_rules! prefetch_panel_ahead {
    () => {
        concat!(
            "prefetcht0 [{bp} + 4096]\n",
            "prefetcht0 [{bp} + 4160]\n",
            "prefetcht0 [{bp} + 4224]\n",
            "prefetcht0 [{bp} + 4288]\n",
            "prefetcht0 [{bp} + 4352]\n",
            "prefetcht0 [{bp} + 4416]\n",
            "prefetcht0 [{bp} + 4480]\n",
            "prefetcht0 [{bp} + 4544]\n",
        )
    };
}

/// One depth step of all 12 rows (see [`eight_rows_step`]).
macro_rules! twelve_rows_step {
    ($fma:ident, $d:literal, $b:literal) => {
        concat!(
            eight_rows_step!($fma, $d, $b),
            $fma!(
                "c80" "c81" ["{a6} + {s} * 2 + ", $d],
                "c90" "c91" ["{a9} + ", $d],
                "ca0" "ca1" ["{a9} + {s} + ", $d],
                "cb0" "cb1" ["{a9} + {s} * 2 + ", $d],
            ),
        )
    };
}

/// Defines `$name`, [`full_tile_steps_in_fma`]'s loop in one form: FMAs written by `$fma`, with
/// `$extra` the operands that adds (one function per form, so that each is one
/// `asm` block a caller picks by the form).
macro_rules! full_tile_steps_fn {
    ($(#[$attr:meta])* $name:ident, $fma:ident, $($extra:tt)*) => {
        $(#[$attr])*
        #[target_feature(enable = "avx512f")]
        unsafe fn $name(
            kc: usize,
            (a, lda): (*const f32, usize),
            (bp, pf): (*const f32, *const f32),
            acc: &mut [[__m512; 2]; MR],
        ) {
            let stride = lda * std::mem::size_of::<f32>();
            let [[c00, c01], [c10, c11], [c20, c21], [c30, c31], [c40, c41], [c50, c51], [c60, c61], [c70, c71], [c80, c81], [c90, c91], [ca0, ca1], [cb0, cb1]] =
                acc;
            // SAFETY: each step reads `NR` floats at `bp` and one float of each of the `MR`
            // rows (row `3 g + r` at `a + 3 g lda + r lda`, `r < 3`), then moves every
            // pointer one depth on; `kc` steps stay inside what the caller guarantees. Only
            // the named registers and flags are written; a prefetch (past the panel too)
            // reads nothing architecturally.
            unsafe {
            std::arch::asm!(
                // Four depth steps per pass while four are left: a quarter of the pointer
                // and counter updates, which compete with the FMAs for their ports.
                "cmp {k}, 4",
                "jb 3f",
                "2:",
                twelve_rows_step!($fma, "0", "0"),
                twelve_rows_step!($fma, "4", "128"),
                twelve_rows_step!($fma, "8", "256"),
                twelve_rows_step!($fma, "12", "384"),
                prefetch_panel_ahead!(),
                "prefetcht0 [{pf}]",
                "add {pf}, 64",
                "add {a0}, 16",
                "add {a3}, 16",
                "add {a6}, 16",
                "add {a9}, 16",
                "add {bp}, 512",
                "sub {k}, 4",
                "cmp {k}, 4",
                "jae 2b",
                "3:",
                "test {k}, {k}",
                "jz 5f",
                "4:",
                twelve_rows_step!($fma, "0", "0"),
                "add {a0}, 4",
                "add {a3}, 4",
                "add {a6}, 4",
                "add {a9}, 4",
                "sub {bp}, -128",
                "dec {k}",
                "jnz 4b",
                "5:",
                k = inout(reg) kc => _,
                bp = inout(reg) bp => _,
                pf = inout(reg) pf => _,
                s = in(reg) stride,
                a0 = inout(reg) a => _,
                a3 = inout(reg) a.add(3 * lda) => _,
                a6 = inout(reg) a.add(6 * lda) => _,
                a9 = inout(reg) a.add(9 * lda) => _,
                b0 = out(zmm_reg) _,
                b1 = out(zmm_reg) _,
                c00 = inout(zmm_reg) *c00,
                c01 = inout(zmm_reg) *c01,
                c10 = inout(zmm_reg) *c10,
                c11 = inout(zmm_reg) *c11,
                c20 = inout(zmm_reg) *c20,
                c21 = inout(zmm_reg) *c21,
                c30 = inout(zmm_reg) *c30,
                c31 = inout(zmm_reg) *c31,
                c40 = inout(zmm_reg) *c40,
                c41 = inout(zmm_reg) *c41,
                c50 = inout(zmm_reg) *c50,
                c51 = inout(zmm_reg) *c51,
                c60 = inout(zmm_reg) *c60,
                c61 = inout(zmm_reg) *c61,
                c70 = inout(zmm_reg) *c70,
                c71 = inout(zmm_reg) *c71,
                c80 = inout(zmm_reg) *c80,
                c81 = inout(zmm_reg) *c81,
                c90 = inout(zmm_reg) *c90,
                c91 = inout(zmm_reg) *c91,
                ca0 = inout(zmm_reg) *ca0,
                ca1 = inout(zmm_reg) *ca1,
                cb0 = inout(zmm_reg) *cb0,
                cb1 = inout(zmm_reg) *cb1,
                $($extra)*
                options(nostack, readonly),
            );
            }
        }
    };
}

full_tile_steps_fn!(
    /// The depth loop of a full `12 x 32` tile, `acc += a @ bp` over `kc >= 1` depths, in
    /// `asm`: four row pointers and the row stride address all twelve rows (written with
    /// intrinsics, the compiler, short of registers for twelve row pointers, reloaded two
    /// of them from the stack at every step). Each row's element is broadcast inside both
    /// FMAs that read it, or with `IN_REGISTER` into a register once ([`Broadcast`]).
    /// Measured in one process, one thread, CPU time (`RAYON_NUM_THREADS=1 gemm_rate
    /// --cpu-time --repeat 10`, two runs), in-register against inside the FMAs, GFLOP/s:
    /// on a 2-vCPU Intel Xeon (family 6 model 167), `128 x 768 x 768` 168 against 147,
    /// `128 x 768 x 3072` 160 against 142-146, `128 x 2048 x 2048` 148-160 against
    /// 132-136, `512 x 768 x 768` 156-165 against 138-148. On a 2-core Zen 4 (2 threads)
    /// the loop broadcasting inside the FMAs ran `512 x 768 x 768` at 225-227 GFLOP/s
    /// against 214 for the intrinsics.///
    /// # Safety
    /// AVX-512F; `a` readable for `MR` rows of `kc` floats at stride `lda`, `bp` for
    /// `NR kc` floats; `kc >= 1`.
    full_tile_steps_in_fma,
    fma_rows,
);

full_tile_steps_fn!(
    /// [`full_tile_steps_in_fma`] broadcasting each row's element into a register once
    /// ([`Broadcast::InRegister`](crate::cpu::Broadcast::InRegister)).
    ///
    /// # Safety
    /// As [`full_tile_steps_in_fma`].
    full_tile_steps_in_register,
    fma_rows_in_register,
    out("zmm31") _,
);

/// The depth loop of a tile of `H < MR` rows other than 8 (and of any tile with no
/// depth), `acc[..H] += a @ bp` over `kc` depths, with intrinsics: each row does its
/// own work alone (one loop for every row count ran all 12, the last row repeated).
/// Measured on a 2-core Zen 4, 2 threads, CPU time (`gemm_rate --cpu-time --repeat
/// 40`, three interleaved runs, GFLOP/s per core): `100 x 768 x 768` (a last tile of 4
/// rows) 106.3-106.5 -> 110.6-114.0, `136 x 768 x 768` 108.6-108.8 -> 109.4-114.0.
///
/// # Safety
/// AVX-512F; `a` readable for `H` rows of `kc` floats at stride `lda`, `bp` for `NR kc`
/// floats.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn steps<const H: usize>(
    kc: usize,
    (a, lda): (*const f32, usize),
    bp: *const f32,
    acc: &mut [[__m512; 2]; MR],
) {
    // SAFETY: rows `r < H` of the caller's rows.
    let row: [*const f32; H] = std::array::from_fn(|r| unsafe { a.add(r * lda) });
    for p in 0..kc {
        // SAFETY: `p < kc`: `NR` floats at `p * NR` of `bp`, one at `p` of each row.
        unsafe {
            let b0 = _mm512_loadu_ps(bp.add(p * NR));
            let b1 = _mm512_loadu_ps(bp.add(p * NR + 16));
            for (accr, &ar) in acc.iter_mut().zip(&row) {
                let x = _mm512_set1_ps(*ar.add(p));
                accr[0] = _mm512_fmadd_ps(x, b0, accr[0]);
                accr[1] = _mm512_fmadd_ps(x, b1, accr[1]);
            }
        }
    }
}

/// Defines `$name`, [`eight_row_steps_in_fma`]'s loop in one form: FMAs written by `$fma`, with
/// `$extra` the operands that adds (one function per form, so that each is one
/// `asm` block a caller picks by the form).
macro_rules! eight_row_steps_fn {
    ($(#[$attr:meta])* $name:ident, $fma:ident, $($extra:tt)*) => {
        $(#[$attr])*
        #[target_feature(enable = "avx512f")]
        unsafe fn $name(
            kc: usize,
            (a, lda): (*const f32, usize),
            (bp, pf): (*const f32, *const f32),
            acc: &mut [[__m512; 2]; 8],
        ) {
            let stride = lda * std::mem::size_of::<f32>();
            let [[c00, c01], [c10, c11], [c20, c21], [c30, c31], [c40, c41], [c50, c51], [c60, c61], [c70, c71]] =
                acc;
            // SAFETY: each step reads `NR` floats at `bp` and one float of each of the 8 rows
            // (row `3 g + r` at `a + 3 g lda + r lda`), then moves every pointer one depth on;
            // `kc` steps stay inside what the caller guarantees. Only the named registers and
            // flags are written; a prefetch (past the panel too) reads nothing
            // architecturally.
            unsafe {
            std::arch::asm!(
                // Four depth steps per pass while four are left, as in `full_tile_steps`.
                "cmp {k}, 4",
                "jb 3f",
                "2:",
                eight_rows_step!($fma, "0", "0"),
                eight_rows_step!($fma, "4", "128"),
                eight_rows_step!($fma, "8", "256"),
                eight_rows_step!($fma, "12", "384"),
                prefetch_panel_ahead!(),
                "prefetcht0 [{pf}]",
                "add {pf}, 64",
                "add {a0}, 16",
                "add {a3}, 16",
                "add {a6}, 16",
                "add {bp}, 512",
                "sub {k}, 4",
                "cmp {k}, 4",
                "jae 2b",
                "3:",
                "test {k}, {k}",
                "jz 5f",
                "4:",
                eight_rows_step!($fma, "0", "0"),
                "add {a0}, 4",
                "add {a3}, 4",
                "add {a6}, 4",
                "sub {bp}, -128",
                "dec {k}",
                "jnz 4b",
                "5:",
                k = inout(reg) kc => _,
                bp = inout(reg) bp => _,
                pf = inout(reg) pf => _,
                s = in(reg) stride,
                a0 = inout(reg) a => _,
                a3 = inout(reg) a.add(3 * lda) => _,
                a6 = inout(reg) a.add(6 * lda) => _,
                b0 = out(zmm_reg) _,
                b1 = out(zmm_reg) _,
                c00 = inout(zmm_reg) *c00,
                c01 = inout(zmm_reg) *c01,
                c10 = inout(zmm_reg) *c10,
                c11 = inout(zmm_reg) *c11,
                c20 = inout(zmm_reg) *c20,
                c21 = inout(zmm_reg) *c21,
                c30 = inout(zmm_reg) *c30,
                c31 = inout(zmm_reg) *c31,
                c40 = inout(zmm_reg) *c40,
                c41 = inout(zmm_reg) *c41,
                c50 = inout(zmm_reg) *c50,
                c51 = inout(zmm_reg) *c51,
                c60 = inout(zmm_reg) *c60,
                c61 = inout(zmm_reg) *c61,
                c70 = inout(zmm_reg) *c70,
                c71 = inout(zmm_reg) *c71,
                $($extra)*
                options(nostack, readonly),
            );
            }
        }
    };
}

eight_row_steps_fn!(
    /// [`full_tile_steps_in_fma`] for a tile of 8 rows, `acc += a @ bp` over `kc >= 1` depths:
    /// the last tile of a product whose rows are 8 more than a multiple of 12 (128 and
    /// 512 rows: GPT-2 at S = 128 and 512, the main example), which the loop for any row
    /// count ran as 12 rows, a third of them thrown away. Measured on a 2-core Zen 4, 2
    /// threads, CPU time (`gemm_rate --cpu-time --repeat 40`, four interleaved runs,
    /// GFLOP/s per core): `128 x 768 x 768` 109-111 -> 115, `128 x 768 x 3072` 110-111 ->
    /// 114, `128 x 3072 x 768` 106-110 -> 107-114.
    ///
    /// # Safety
    /// AVX-512F; `a` readable for 8 rows of `kc` floats at stride `lda`, `bp` for `NR kc`
    /// floats; `kc >= 1`.
    eight_row_steps_in_fma,
    fma_rows,
);

eight_row_steps_fn!(
    /// [`eight_row_steps_in_fma`] broadcasting each row's element into a register once
    /// ([`Broadcast::InRegister`](crate::cpu::Broadcast::InRegister)).
    ///
    /// # Safety
    /// As [`eight_row_steps_in_fma`].
    eight_row_steps_in_register,
    fma_rows_in_register,
    out("zmm31") _,
);

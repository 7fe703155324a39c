//! The work split: [`run`] builds a call's [`Problem`], hands it to the decode path or
//! splits it into work items (one batch entry, one query head, a block of query rows)
//! over rayon's threads, each run by the work-item function of the chosen kernel,
//! compiled for its instruction set ([`pick_item`]).

use rayon::prelude::*;

use super::kernel::SdpaKernel;
use super::mask::MaskView;
use super::select::{block_sizes, pick_kernel, takes_decode, Path};
use super::tile::{Acc, HalfSrc};
use super::unpacked::process_item;
use super::{decode, Problem, Scratch, SdpaOptions, SEQUENTIAL_WORK};
#[cfg(target_arch = "x86_64")]
use super::{packed, packed512};
use crate::cpu::attention_ref::Dims;
use crate::cpu::{Broadcast, Isa};
use crate::{Element, KernelError, KernelOptions, Tensor};

type ItemFn<T> = fn(&Problem<'_, T>, &mut Scratch<<T as Element>::Acc>, usize, usize, &mut [T]);

#[allow(clippy::too_many_arguments)]
pub(super) fn run<T: Element>(
    dims: &Dims,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&MaskView<'_, T>>,
    opts: &SdpaOptions,
    kernel: &KernelOptions,
    scale: f64,
    path: Path,
) -> Result<Vec<T>, KernelError>
where
    T::Acc: decode::Tiles,
{
    let n_out = dims.batch * dims.hq * dims.sq * dims.dv;
    if n_out == 0 || dims.skv == 0 {
        return Ok(vec![T::from_f64(0.0); n_out]);
    }
    // Every row is written by its work item (a value, or the fully-masked fill).
    let mut out = crate::cpu::pool::buffer::<T>(n_out);
    let isa = kernel.sdpa_isa();
    let chosen = pick_kernel(T::DTYPE, path, dims.d, isa).tuned(&kernel.sdpa);
    let avx512 = chosen.is_packed_avx512();
    let (block_q, block_k) = block_sizes(opts.is_causal, avx512, kernel.sdpa.blocks);
    let prob = Problem {
        dims: *dims,
        q: q.as_slice::<T>()?,
        k: k.as_slice::<T>()?,
        v: v.as_slice::<T>()?,
        k_direct: k.as_slice::<T::Acc>().ok(),
        v_direct: v.as_slice::<T::Acc>().ok(),
        k_half: HalfSrc::of(k),
        v_half: HalfSrc::of(v),
        q_f32: q.as_slice::<f32>().ok(),
        k_f32: k.as_slice::<f32>().ok(),
        v_f32: v.as_slice::<f32>().ok(),
        q_half: HalfSrc::of(q),
        call: {
            static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        },
        mask,
        causal: opts.is_causal,
        scale: T::Acc::from_f64(scale),
        fully_masked: opts.fully_masked_rows,
        block_q,
        block_k,
        // `SdpaTuning::fuse_softmax` off keeps the softmax step a pass of its own (to
        // measure what the fusion brings).
        fuse_softmax: !matches!(path, Path::SeparateSoftmax | Path::PackedAvx2Separate)
            && kernel.sdpa.fuse_softmax,
        micro: kernel.sdpa.micro_kernels && isa >= Isa::Avx2Fma,
        loop_order: kernel.sdpa.loop_order,
        in_register: chosen.broadcast() == Broadcast::InRegister,
        bf16_dot: matches!(
            chosen,
            SdpaKernel::PackedAvx512Bf16 | SdpaKernel::PackedAvx512Bf16InRegister
        ),
    };
    if takes_decode(T::DTYPE, path, kernel, dims.sq, dims.skv, dims.d) {
        let level = if isa >= Isa::Avx512 && kernel.sdpa.micro_kernels {
            decode::Level::Avx512
        } else if isa >= Isa::Avx2Fma {
            decode::Level::Avx2
        } else {
            decode::Level::Plain
        };
        decode::run(&prob, level, &mut out);
        return Ok(out);
    }
    let item = pick_item::<T>(chosen);
    let head_len = dims.sq * dims.dv;
    // A small problem runs on the calling thread: waking the pool's threads for it
    // costs more than it saves (the corpus models' attention is a few microseconds).
    let work = dims.batch * dims.hq * dims.sq * dims.skv * (dims.d + dims.dv);
    if work < SEQUENTIAL_WORK {
        let mut scratch = Scratch::default();
        for (bh, head) in out.chunks_mut(head_len).enumerate() {
            for (qb, chunk) in head.chunks_mut(block_q * dims.dv).enumerate() {
                item(&prob, &mut scratch, bh, qb, chunk);
            }
        }
        return Ok(out);
    }
    out.par_chunks_mut(head_len)
        .enumerate()
        .flat_map(|(bh, head)| {
            head.par_chunks_mut(block_q * dims.dv)
                .enumerate()
                .map(move |(qb, chunk)| (bh, qb, chunk))
        })
        .for_each_init(Scratch::default, |scratch, (bh, qb, chunk)| {
            item(&prob, scratch, bh, qb, chunk)
        });
    Ok(out)
}

/// The work-item function of [`pick_kernel`]'s choice `kernel`.
fn pick_item<T: Element>(kernel: SdpaKernel) -> ItemFn<T>
where
    T::Acc: Acc,
{
    #[cfg(target_arch = "x86_64")]
    match kernel {
        SdpaKernel::PackedAvx512
        | SdpaKernel::PackedAvx512Bf16
        | SdpaKernel::PackedAvx512InRegister
        | SdpaKernel::PackedAvx512Bf16InRegister => {
            return |p, s, bh, qb, o| {
                // SAFETY: `item_packed512` requires AVX2, FMA and the AVX-512 features
                // of `avx512::available`, all detected by `pick_kernel` before it chose
                // this kernel.
                unsafe { item_packed512(p, s, bh, qb, o) }
            };
        }
        SdpaKernel::PackedAvx2 => {
            return |p, s, bh, qb, o| {
                // SAFETY: `item_packed` only requires the avx2 and fma target
                // features, detected by `pick_kernel` before it chose this kernel.
                unsafe { item_packed(p, s, bh, qb, o) }
            };
        }
        SdpaKernel::Avx2 => {
            return |p, s, bh, qb, o| {
                // SAFETY: `item_avx2_fma` only requires the avx2 and fma target features,
                // detected by `pick_kernel` before it chose this kernel. It pays: see
                // the measurement in the module docs.
                unsafe { item_avx2_fma(p, s, bh, qb, o) }
            };
        }
        // `pick_kernel` never chooses the decode path (`run` takes it before).
        SdpaKernel::Plain | SdpaKernel::Decode => {}
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = kernel;
    item_plain::<T>
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn item_avx2_fma<T: Element>(
    prob: &Problem<'_, T>,
    scratch: &mut Scratch<T::Acc>,
    bh: usize,
    qb: usize,
    out: &mut [T],
) where
    T::Acc: Acc,
{
    process_item::<T, true>(prob, scratch, bh, qb, out)
}

/// The AVX-512 packed work item (`packed512.rs`), compiled with AVX2, FMA and
/// AVX-512F/BW/BF16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512bf16")]
unsafe fn item_packed512<T: Element>(
    prob: &Problem<'_, T>,
    _scratch: &mut Scratch<T::Acc>,
    bh: usize,
    qb: usize,
    out: &mut [T],
) {
    // SAFETY: the CPU has AVX2, FMA and the AVX-512 features, this function's contract.
    unsafe { packed512::item(prob, bh, qb, out) }
}

/// The packed work item (`packed.rs`), compiled with AVX2+FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn item_packed<T: Element>(
    prob: &Problem<'_, T>,
    _scratch: &mut Scratch<T::Acc>,
    bh: usize,
    qb: usize,
    out: &mut [T],
) {
    // SAFETY: the CPU has AVX2 and FMA, this function's contract.
    unsafe { packed::item(prob, bh, qb, out) }
}

fn item_plain<T: Element>(
    prob: &Problem<'_, T>,
    scratch: &mut Scratch<T::Acc>,
    bh: usize,
    qb: usize,
    out: &mut [T],
) where
    T::Acc: Acc,
{
    process_item::<T, false>(prob, scratch, bh, qb, out)
}

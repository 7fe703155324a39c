//! Host side of the fused SDPA kernel: validation, specialisation and launch.

use cudarc::driver::sys::CUfunction_attribute_enum;
use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::{cuda_err, kernels, CudaTensor};
use crate::broadcast::{broadcast_shapes, broadcast_strides, Odometer};
use crate::{DType, KernelError};

/// Options of [`sdpa`], as in PyTorch's `scaled_dot_product_attention`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SdpaOptions {
    /// Causal masking, aligned top-left (query `i` sees keys `j <= i`).
    pub is_causal: bool,
    /// Score scale; `None` means `1 / sqrt(D)`.
    pub scale: Option<f64>,
    /// Grouped kv heads: `Hq` a multiple of `Hkv`, query head `h` reads kv head
    /// `h / (Hq / Hkv)`.
    pub enable_gqa: bool,
}

/// Which kernel a call runs and how it is specialised.
#[derive(Clone, Copy, Debug)]
struct Config {
    mma: bool,
    warps: u32,
    block_n: u32,
    q_in_regs: bool,
    m_tiles: u32,
}

fn choose(dtype: DType, d: usize, dv: usize) -> Config {
    let mma =
        matches!(dtype, DType::F16 | DType::BF16) && d.is_multiple_of(16) && dv.is_multiple_of(16);
    if !mma {
        return Config {
            mma,
            warps: 8,
            block_n: 32,
            q_in_regs: false,
            m_tiles: 1,
        };
    }
    let wide = d.max(dv);
    let mut cfg = match wide {
        0..=64 => Config {
            mma,
            warps: 4,
            block_n: 64,
            q_in_regs: true,
            m_tiles: 2,
        },
        65..=128 => Config {
            mma,
            warps: 4,
            block_n: 64,
            q_in_regs: false,
            m_tiles: 2,
        },
        _ => Config {
            mma,
            warps: 4,
            block_n: 32,
            q_in_regs: false,
            m_tiles: 1,
        },
    };
    // Tuning hook: the options' `SdpaTuning::cuda`.
    if let Some(t) = crate::KernelOptions::current().sdpa.cuda {
        cfg.warps = t.warps;
        cfg.block_n = t.block_n;
        cfg.m_tiles = t.m_tiles;
        cfg.q_in_regs = t.q_in_regs;
    }
    cfg
}

/// Fused scaled dot-product attention on the GPU:
/// `softmax(q @ k^T * scale + mask) @ v`, without materialising the scores.
///
/// Shapes and semantics are those of [`crate::cpu::sdpa_reference`]: `q` is
/// `[.., Hq, Sq, D]`, `k` `[.., Hkv, Skv, D]`, `v` `[.., Hkv, Skv, Dv]`, the result
/// `[.., Hq, Sq, Dv]` in `q`'s dtype; `mask` broadcasts to `[.., Hq, Sq, Skv]` and is bool
/// (`true` attends) or additive float (f32, f16 or bf16); a row with every key masked
/// gives NaN. `D`, `Dv` ≤ 256. f16/bf16 with `D` and `Dv` multiples of 16 run on tensor
/// cores (f32 accumulation); everything else (f32 too) on a generic fused kernel.
/// Unlike the reference, `mask` and `is_causal` may be combined.
pub fn sdpa(
    q: &CudaTensor,
    k: &CudaTensor,
    v: &CudaTensor,
    mask: Option<&CudaTensor>,
    opts: &SdpaOptions,
) -> Result<CudaTensor, KernelError> {
    let op = "cuda sdpa";
    let dtype = q.dtype();
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(KernelError::UnsupportedDType {
            op,
            dtype,
            expected: "f32, f16 or bf16",
        });
    }
    for t in [k, v] {
        if t.dtype() != dtype {
            return Err(KernelError::DTypeMismatch {
                op,
                lhs: dtype,
                rhs: t.dtype(),
            });
        }
    }
    let dev = q.device().clone();
    for t in [k, v].into_iter().chain(mask) {
        if t.device().ordinal() != dev.ordinal() {
            return Err(KernelError::invalid(op, "operands on different devices"));
        }
    }
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let r = qs.len();
    let shapes = || format!("q {qs:?}, k {ks:?}, v {vs:?}");
    if r < 2 || ks.len() != r || vs.len() != r {
        return Err(KernelError::shape(
            op,
            format!("q, k, v need one rank of at least 2: {}", shapes()),
        ));
    }
    let lead = r.saturating_sub(3);
    let (hq, hkv, hv) = if r >= 3 {
        (qs[r - 3], ks[r - 3], vs[r - 3])
    } else {
        (1, 1, 1)
    };
    if qs[..lead] != ks[..lead]
        || qs[..lead] != vs[..lead]
        || hkv != hv
        || ks[r - 1] != qs[r - 1]
        || vs[r - 2] != ks[r - 2]
    {
        return Err(KernelError::shape(
            op,
            format!("incompatible shapes: {}", shapes()),
        ));
    }
    if hq != hkv && !(opts.enable_gqa && hkv > 0 && hq.is_multiple_of(hkv)) {
        return Err(KernelError::shape(
            op,
            format!(
                "{hq} query heads and {hkv} key/value heads need enable_gqa with Hq a multiple of Hkv: {}",
                shapes()
            ),
        ));
    }
    let batch: usize = qs[..lead].iter().product();
    let (sq, skv, d, dv) = (qs[r - 2], ks[r - 2], qs[r - 1], vs[r - 1]);
    if d > 256 || dv > 256 || d == 0 || dv == 0 {
        return Err(KernelError::Unsupported {
            op,
            msg: format!("head dims must be 1..=256, got D = {d}, Dv = {dv}"),
        });
    }
    let bh = batch * hq;
    let mut out_shape = qs[..r - 1].to_vec();
    out_shape.push(dv);
    let out = dev.zeros(dtype, &out_shape)?;
    if bh == 0 || sq == 0 {
        return Ok(out);
    }
    if bh > 65535 {
        return Err(KernelError::Unsupported {
            op,
            msg: format!("{bh} (batch x heads) is over the grid limit of 65535"),
        });
    }
    let to_i32 = |x: usize| {
        i32::try_from(x).map_err(|_| KernelError::Unsupported {
            op,
            msg: format!("size {x} is over i32"),
        })
    };

    // Mask: kind and broadcast layout.
    let mut score_shape = qs[..r - 1].to_vec();
    score_shape.push(skv);
    let (mask_kind, head_off, row_stride, col_stride) = match mask {
        None => (0, vec![0i64], 0i64, 0i64),
        Some(m) => {
            let kind = match m.dtype() {
                DType::Bool => 1,
                DType::F32 => 2,
                DType::F16 => 3,
                DType::BF16 => 4,
                other => {
                    return Err(KernelError::UnsupportedDType {
                        op,
                        dtype: other,
                        expected: "a bool, f32, f16 or bf16 mask",
                    })
                }
            };
            if broadcast_shapes(m.shape(), &score_shape).as_deref() != Some(&score_shape[..]) {
                return Err(KernelError::shape(
                    op,
                    format!(
                        "attn_mask {:?} does not broadcast to the scores {score_shape:?}",
                        m.shape()
                    ),
                ));
            }
            let sr = score_shape.len();
            let st = broadcast_strides(m.shape(), &score_shape);
            let heads = &score_shape[..sr - 2];
            let head_st: Vec<[usize; 1]> = st[..sr - 2].iter().map(|&s| [s]).collect();
            let mut odo = Odometer::new(heads, &head_st, [0], 0);
            let offs: Vec<i64> = (0..heads.iter().product::<usize>())
                .map(|_| {
                    let o = odo.offsets[0] as i64;
                    odo.advance();
                    o
                })
                .collect();
            (kind, offs, st[sr - 2] as i64, st[sr - 1] as i64)
        }
    };
    let head_off_dev = dev.upload_i64(&head_off)?;

    let cfg = choose(dtype, d, dv);
    let dtype_id = match dtype {
        DType::F32 => 0,
        DType::F16 => 1,
        _ => 2,
    };
    let defines: Vec<(&str, String)> = vec![
        ("DTYPE_ID", dtype_id.to_string()),
        ("HEAD_DIM", d.to_string()),
        ("HEAD_DIM_V", dv.to_string()),
        ("MASK_KIND", mask_kind.to_string()),
        ("IS_CAUSAL", (opts.is_causal as u8).to_string()),
        ("NUM_WARPS", cfg.warps.to_string()),
        ("BLOCK_N", cfg.block_n.to_string()),
        ("Q_IN_REGS", (cfg.q_in_regs as u8).to_string()),
        ("M_TILES", cfg.m_tiles.to_string()),
    ];
    let (func_name, rows_per_block, smem) = if cfg.mma {
        let bm = 16 * cfg.m_tiles as usize * cfg.warps as usize;
        let bn = cfg.block_n as usize;
        let smem = (bm * (d + 8) + 2 * bn * (d + 8) + 2 * bn * (dv + 8)) * 2;
        ("sdpa_mma", bm, smem)
    } else {
        let nw = cfg.warps as usize;
        let smem = (32 * (d + 1) + 32 * dv + nw * d) * 4;
        ("sdpa_generic", nw, smem)
    };
    let f = dev.function("sdpa.cu", kernels::SDPA, &defines, func_name)?;
    if smem > 48 * 1024 {
        f.set_attribute(
            CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            smem as i32,
        )
        .map_err(|e| cuda_err("shared memory", e))?;
    }
    let scale = opts.scale.unwrap_or(1.0 / (d as f64).sqrt());
    let scale_log2 = (scale * std::f64::consts::LOG2_E) as f32;
    let (hq_i, hkv_i, sq_i, skv_i) = (to_i32(hq)?, to_i32(hkv)?, to_i32(sq)?, to_i32(skv)?);
    let launch = LaunchConfig {
        grid_dim: (sq.div_ceil(rows_per_block) as u32, bh as u32, 1),
        block_dim: (32 * cfg.warps, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    let stream = dev.stream().clone();
    let (qv, kv, vv, ov) = (q.view(), k.view(), v.view(), out.view());
    let mv = mask.unwrap_or(q).view();
    let mut b = stream.launch_builder(&f);
    b.arg(&qv)
        .arg(&kv)
        .arg(&vv)
        .arg(&ov)
        .arg(&mv)
        .arg(&head_off_dev)
        .arg(&row_stride)
        .arg(&col_stride)
        .arg(&hq_i)
        .arg(&hkv_i)
        .arg(&sq_i)
        .arg(&skv_i)
        .arg(&scale_log2);
    // SAFETY: the argument list matches the kernel's signature (pointers to q, k, v, out,
    // mask, the i64 head offsets, then i64, i64, 4 x i32, f32); every buffer was allocated
    // for the shapes validated above (q/k/v/out contiguous, the mask read only through
    // offsets inside its broadcast layout), and the grid covers exactly [Sq, batch*Hq].
    unsafe { b.launch(launch) }.map_err(|e| cuda_err("launch sdpa", e))?;
    Ok(out)
}

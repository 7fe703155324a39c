//! 2-D convolution (NCHW input, OIHW weights) by im2col and GEMM.

use rayon::prelude::*;

use crate::cpu::matmul::Gemm;
use crate::cpu::util::same_dtype;
use crate::macros::dispatch_float;
use crate::{Element, KernelError, Real, Tensor};

/// Validated sizes of one convolution.
struct Conv {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    o: usize,
    kh: usize,
    kw: usize,
    ho: usize,
    wo: usize,
    groups: usize,
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
}

fn check(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    stride: [i64; 2],
    padding: [i64; 2],
    dilation: [i64; 2],
    groups: i64,
) -> Result<Conv, KernelError> {
    let op = "conv2d";
    if x.rank() != 4 || w.rank() != 4 {
        return Err(KernelError::shape(
            op,
            format!(
                "expects NCHW input and OIHW weight, got {:?} and {:?}",
                x.shape(),
                w.shape()
            ),
        ));
    }
    same_dtype(op, x, w)?;
    if stride.iter().any(|&s| s < 1)
        || dilation.iter().any(|&d| d < 1)
        || padding.iter().any(|&p| p < 0)
        || groups < 1
    {
        return Err(KernelError::invalid(
            op,
            format!("bad stride {stride:?}, padding {padding:?}, dilation {dilation:?} or groups {groups}"),
        ));
    }
    let (n, c, h, wd) = (x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]);
    let (o, cg, kh, kw) = (w.shape()[0], w.shape()[1], w.shape()[2], w.shape()[3]);
    let g = groups as usize;
    if c % g != 0 || o % g != 0 || cg * g != c || kh == 0 || kw == 0 {
        return Err(KernelError::shape(
            op,
            format!(
                "weight {:?} does not fit input {:?} with groups {groups}",
                w.shape(),
                x.shape()
            ),
        ));
    }
    if let Some(b) = bias {
        same_dtype(op, x, b)?;
        if b.shape() != [o] {
            return Err(KernelError::shape(
                op,
                format!("bias {:?} should have shape [{o}]", b.shape()),
            ));
        }
    }
    let out_dim = |size: usize, k: usize, i: usize| -> Result<usize, KernelError> {
        let span = (size as i64) + 2 * padding[i] - dilation[i] * (k as i64 - 1) - 1;
        if span < 0 {
            return Err(KernelError::shape(
                op,
                format!(
                    "kernel {:?} (dilation {dilation:?}) is larger than padded input {:?}",
                    w.shape(),
                    x.shape()
                ),
            ));
        }
        Ok((span / stride[i]) as usize + 1)
    };
    Ok(Conv {
        n,
        c,
        h,
        w: wd,
        o,
        kh,
        kw,
        ho: out_dim(h, kh, 0)?,
        wo: out_dim(wd, kw, 1)?,
        groups: g,
        stride: [stride[0] as usize, stride[1] as usize],
        padding: [padding[0] as usize, padding[1] as usize],
        dilation: [dilation[0] as usize, dilation[1] as usize],
    })
}

/// 2-D convolution (cross-correlation, as PyTorch): `x` is `[N, C, H, W]`, `w` is
/// `[O, C / groups, kH, kW]`, `bias` is `[O]`; output `[N, O, Ho, Wo]`.
///
/// Float dtypes only (f16/bf16 computed in f32); `x`, `w` and `bias` share a dtype.
/// Stride and dilation must be at least 1, padding non-negative.
pub fn conv2d(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    stride: [i64; 2],
    padding: [i64; 2],
    dilation: [i64; 2],
    groups: i64,
) -> Result<Tensor, KernelError> {
    let cv = check(x, w, bias, stride, padding, dilation, groups)?;
    let shape = vec![cv.n, cv.o, cv.ho, cv.wo];
    dispatch_float!(x.dtype(), "conv2d", |T| {
        let out = conv_impl::<T>(&cv, x, w, bias);
        Ok(Tensor::from_data(shape, out))
    })
}

fn conv_impl<T: Element>(cv: &Conv, x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Vec<T>
where
    T::Acc: Gemm,
{
    let xs = x.acc_cow::<T>();
    let ws = w.acc_cow::<T>();
    let bs = bias.map(|b| b.acc_cow::<T>());
    let (cg, og) = (cv.c / cv.groups, cv.o / cv.groups);
    let kdim = cg * cv.kh * cv.kw;
    let spatial = cv.ho * cv.wo;
    let image = cv.c * cv.h * cv.w;
    let mut out = vec![T::Acc::ZERO; cv.n * cv.o * spatial];
    if out.is_empty() {
        return Vec::new();
    }
    let one_image = |(n, dst): (usize, &mut [T::Acc])| {
        let mut col = vec![T::Acc::ZERO; kdim * spatial];
        for g in 0..cv.groups {
            let src = &xs[n * image + g * cg * cv.h * cv.w..];
            im2col(cv, src, cg, &mut col);
            let wg = &ws[g * og * kdim..];
            let dg = &mut dst[g * og * spatial..(g + 1) * og * spatial];
            T::Acc::gemm(og, kdim, spatial, wg, kdim, 1, &col, spatial, 1, dg);
        }
        if let Some(b) = &bs {
            for (row, &bv) in dst.chunks_mut(spatial).zip(b.iter()) {
                row.iter_mut().for_each(|v| *v += bv);
            }
        }
    };
    let per_image = cv.o * spatial;
    if cv.n > 1 {
        out.par_chunks_mut(per_image)
            .enumerate()
            .for_each(one_image);
    } else {
        out.chunks_mut(per_image).enumerate().for_each(one_image);
    }
    out.into_iter().map(T::from_acc).collect()
}

/// Unfolds `cg` channels of one image into `col`, `[cg * kh * kw, ho * wo]`.
fn im2col<A: Real>(cv: &Conv, src: &[A], cg: usize, col: &mut [A]) {
    let spatial = cv.ho * cv.wo;
    let mut r = 0;
    for ci in 0..cg {
        let plane = &src[ci * cv.h * cv.w..(ci + 1) * cv.h * cv.w];
        for ki in 0..cv.kh {
            for kj in 0..cv.kw {
                let dst = &mut col[r * spatial..(r + 1) * spatial];
                for oy in 0..cv.ho {
                    let iy =
                        (oy * cv.stride[0] + ki * cv.dilation[0]) as isize - cv.padding[0] as isize;
                    for ox in 0..cv.wo {
                        let ix = (ox * cv.stride[1] + kj * cv.dilation[1]) as isize
                            - cv.padding[1] as isize;
                        let inside =
                            iy >= 0 && (iy as usize) < cv.h && ix >= 0 && (ix as usize) < cv.w;
                        dst[oy * cv.wo + ox] = if inside {
                            plane[iy as usize * cv.w + ix as usize]
                        } else {
                            A::ZERO
                        };
                    }
                }
                r += 1;
            }
        }
    }
}

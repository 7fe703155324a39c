//! The tile kernel: runs a group [`Program`] over its broadcast output shape a tile of
//! `f32` lanes at a time, so no intermediate of the group is ever written to memory.
//!
//! A program is compiled, per call, into register instructions: each group input is
//! read in place (an `f32` input of the full shape), filled once (a single element) or
//! gathered per tile (broadcast or converted from f16/bf16/bool); each instruction writes
//! a register of `TILE` lanes, reused once its last reader has run; outputs are stored
//! (converted to their dtype) at the end of each tile. Tiles are spread over rayon.

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use rayon::prelude::*;

use graphrw_kernels::broadcast::{broadcast_shapes, broadcast_strides, collapse_dims};
use graphrw_kernels::Tensor;

use super::lanes::{apply, LaneOp};
use super::program::{Operand, Program};
use crate::meta::{DType, TensorMeta};
use crate::ops::Op;

/// Lanes per tile: every register is this many `f32` (8 KiB), so a program's registers
/// stay in the L1/L2 cache.
pub const TILE: usize = 2048;

/// Tiles per rayon task.
const TILES_PER_TASK: usize = 16;

/// The dtypes a group's values may have (all computed as `f32`).
pub fn lane_dtype(dt: DType) -> bool {
    matches!(dt, DType::F32 | DType::F16 | DType::BF16 | DType::Bool)
}

/// Where an instruction reads lanes from.
#[derive(Clone, Copy, Debug)]
enum Src {
    /// A register.
    Reg(usize),
    /// Group input `i` itself (`f32`, already of the output shape).
    Direct(usize),
}

#[derive(Clone, Debug)]
enum Load {
    /// Read in place.
    Direct,
    /// One element, filled into register `reg` once per task.
    Splat { reg: usize, value: f32 },
    /// Gathered into register `reg` every tile.
    Gather {
        reg: usize,
        shape: Vec<usize>,
        strides: Vec<usize>,
    },
}

#[derive(Clone, Debug)]
struct Step {
    op: LaneOp,
    src: Vec<Src>,
    dst: usize,
    round: Option<DType>,
}

/// A program compiled for concrete input tensors.
struct Compiled {
    numel: usize,
    loads: Vec<Load>,
    steps: Vec<Step>,
    regs: usize,
    outputs: Vec<(usize, DType)>,
}

/// Runs `program` on `inputs`; `metas` are the output metadata the node declares.
pub fn run_program(program: &Program, inputs: &[&Tensor]) -> Result<Vec<Tensor>, String> {
    let metas_in: Vec<TensorMeta> = inputs.iter().map(|t| TensorMeta::of(t)).collect();
    let refs: Vec<&TensorMeta> = metas_in.iter().collect();
    let all = program.infer_all(&refs).map_err(|e| e.0)?;
    let mut shape: Vec<usize> = Vec::new();
    for t in inputs {
        shape = broadcast_shapes(&shape, t.shape())
            .ok_or_else(|| format!("inputs of shapes {:?} do not broadcast", shapes(inputs)))?;
    }
    for &k in &program.outputs {
        let want = all[k].shape.as_known().unwrap_or_default();
        if want.iter().map(|&d| d as usize).ne(shape.iter().copied()) {
            return Err(format!(
                "output %{k} has shape {:?}, the group's iteration shape is {shape:?} \
                 (every output must have the broadcast shape of the inputs)",
                all[k].shape
            ));
        }
    }
    let c = compile(program, inputs, &all, &shape)?;
    Ok(execute(&c, inputs, &shape))
}

fn shapes(inputs: &[&Tensor]) -> Vec<Vec<usize>> {
    inputs.iter().map(|t| t.shape().to_vec()).collect()
}

fn scalar_f32(t: &Tensor) -> f32 {
    t.to_f64_vec().first().copied().unwrap_or(0.0) as f32
}

fn compile(
    p: &Program,
    inputs: &[&Tensor],
    metas: &[TensorMeta],
    shape: &[usize],
) -> Result<Compiled, String> {
    let numel: usize = shape.iter().product();
    let nin = inputs.len();
    // Last instruction reading each value (inputs first, then results); outputs live
    // to the end.
    let mut last = vec![0usize; nin + p.instrs.len()];
    for (k, ins) in p.instrs.iter().enumerate() {
        for a in &ins.args {
            let v = match *a {
                Operand::Input(i) => i,
                Operand::Result(r) => nin + r,
            };
            last[v] = k;
        }
    }
    for &o in &p.outputs {
        last[nin + o] = usize::MAX;
    }
    let mut free: Vec<usize> = Vec::new();
    let mut regs = 0usize;
    let mut alloc = |free: &mut Vec<usize>| {
        free.pop().unwrap_or_else(|| {
            regs += 1;
            regs - 1
        })
    };
    let mut loads = Vec::with_capacity(nin);
    let mut where_is: Vec<Src> = Vec::with_capacity(nin + p.instrs.len());
    for (i, t) in inputs.iter().enumerate() {
        if !lane_dtype(t.dtype()) {
            return Err(format!(
                "input {i} is {}, a tile holds f32/f16/bf16/bool",
                t.dtype()
            ));
        }
        let load = if t.dtype() == DType::F32 && t.shape() == shape {
            Load::Direct
        } else if t.numel() == 1 {
            Load::Splat {
                reg: alloc(&mut free),
                value: scalar_f32(t),
            }
        } else {
            let st = broadcast_strides(t.shape(), shape);
            let (s, st) = collapse_dims::<1>(shape, [&st]);
            Load::Gather {
                reg: alloc(&mut free),
                shape: s,
                strides: st.iter().map(|x| x[0]).collect(),
            }
        };
        where_is.push(match load {
            Load::Direct => Src::Direct(i),
            Load::Splat { reg, .. } | Load::Gather { reg, .. } => Src::Reg(reg),
        });
        loads.push(load);
    }
    let mut steps = Vec::with_capacity(p.instrs.len());
    for (k, ins) in p.instrs.iter().enumerate() {
        let out_dt = metas[k].dtype;
        let builtin = ins.op.builtin;
        let mut op = builtin
            .and_then(LaneOp::of_builtin)
            .ok_or_else(|| format!("instruction %{k}: a tile cannot run `{}`", ins.op.name))?;
        let attrs = crate::ops::Attrs::new(ins.op.attrs, &ins.attrs);
        match builtin {
            Some(Op::Gelu) => {
                op = LaneOp::Unary(attrs.gelu_approximation().map_err(|e| e.0)?.unary())
            }
            Some(Op::MaskedFill) => {
                let v = attrs.float("value").map_err(|e| e.0)?;
                op = LaneOp::MaskedFill(scalar_f32(&Tensor::full(out_dt, &[], v)));
            }
            Some(Op::Cast) if out_dt == DType::Bool => op = LaneOp::ToBool,
            Some(Op::Dropout) if attrs.bool("train").map_err(|e| e.0)? => {
                return Err("training-mode dropout is not supported".into())
            }
            _ => {}
        }
        if !lane_dtype(out_dt) {
            return Err(format!("instruction %{k} gives {out_dt}"));
        }
        let src: Vec<Src> = ins
            .args
            .iter()
            .map(|a| match *a {
                Operand::Input(i) => where_is[i],
                Operand::Result(r) => where_is[nin + r],
            })
            .collect();
        let dst = alloc(&mut free);
        // Registers whose last reader is this instruction are free from the next one.
        for a in &ins.args {
            let v = match *a {
                Operand::Input(i) => i,
                Operand::Result(r) => nin + r,
            };
            if last[v] == k {
                if let Src::Reg(r) = where_is[v] {
                    if !matches!(loads.get(v), Some(Load::Splat { .. })) && !free.contains(&r) {
                        free.push(r);
                    }
                }
            }
        }
        where_is.push(Src::Reg(dst));
        let round = matches!(out_dt, DType::F16 | DType::BF16).then_some(out_dt);
        steps.push(Step {
            op,
            src,
            dst,
            round,
        });
    }
    let outputs = p
        .outputs
        .iter()
        .map(|&k| match where_is[nin + k] {
            Src::Reg(r) => (r, metas[k].dtype),
            Src::Direct(_) => unreachable!("instruction results live in registers"),
        })
        .collect();
    Ok(Compiled {
        numel,
        loads,
        steps,
        regs,
        outputs,
    })
}

/// An output buffer being written.
enum OutSlice<'a> {
    F32(&'a mut [f32]),
    F16(&'a mut [f16]),
    BF16(&'a mut [bf16]),
    Bool(&'a mut [bool]),
}

enum OutVec {
    F32(Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    Bool(Vec<bool>),
}

impl OutVec {
    /// An output of `n` elements, every one of which the tasks overwrite: from the
    /// run's buffer pool when it holds a fitting buffer (no zeroing pass).
    fn new(dt: DType, n: usize) -> OutVec {
        use graphrw_kernels::cpu::pool::buffer;
        match dt {
            DType::F16 => OutVec::F16(buffer(n)),
            DType::BF16 => OutVec::BF16(buffer(n)),
            DType::Bool => OutVec::Bool(buffer(n)),
            _ => OutVec::F32(buffer(n)),
        }
    }

    fn chunks(&mut self, size: usize) -> Vec<OutSlice<'_>> {
        match self {
            OutVec::F32(v) => v.chunks_mut(size).map(OutSlice::F32).collect(),
            OutVec::F16(v) => v.chunks_mut(size).map(OutSlice::F16).collect(),
            OutVec::BF16(v) => v.chunks_mut(size).map(OutSlice::BF16).collect(),
            OutVec::Bool(v) => v.chunks_mut(size).map(OutSlice::Bool).collect(),
        }
    }

    fn into_tensor(self, shape: &[usize]) -> Tensor {
        let s = shape.to_vec();
        let t = match self {
            OutVec::F32(v) => Tensor::from_vec(s, v),
            OutVec::F16(v) => Tensor::from_vec(s, v),
            OutVec::BF16(v) => Tensor::from_vec(s, v),
            OutVec::Bool(v) => Tensor::from_vec(s, v),
        };
        t.expect("an output buffer has the element count of its shape")
    }
}

/// The f32 view of a tensor, when it is f32.
fn f32_slice(t: &Tensor) -> Option<&[f32]> {
    t.as_slice::<f32>().ok()
}

fn execute(c: &Compiled, inputs: &[&Tensor], shape: &[usize]) -> Vec<Tensor> {
    let mut outs: Vec<OutVec> = c
        .outputs
        .iter()
        .map(|&(_, dt)| OutVec::new(dt, c.numel))
        .collect();
    if c.numel > 0 {
        let task = TILE * TILES_PER_TASK;
        let mut per_out: Vec<std::vec::IntoIter<OutSlice<'_>>> = outs
            .iter_mut()
            .map(|o| o.chunks(task).into_iter())
            .collect();
        let ntasks = c.numel.div_ceil(task);
        let tasks: Vec<(usize, Vec<OutSlice<'_>>)> = (0..ntasks)
            .map(|t| {
                let slices = per_out
                    .iter_mut()
                    .map(|it| it.next().expect("one chunk per task"))
                    .collect();
                (t * task, slices)
            })
            .collect();
        let direct: Vec<Option<&[f32]>> = inputs
            .iter()
            .zip(&c.loads)
            .map(|(t, l)| match l {
                Load::Direct => f32_slice(t),
                _ => None,
            })
            .collect();
        // One allocation per register (`vec![row; n]` would also copy the row n times).
        let fresh = || -> Vec<Vec<f32>> { (0..c.regs).map(|_| vec![0f32; TILE]).collect() };
        // Read on the calling thread, where the plan's options are installed.
        let isa = graphrw_kernels::elementwise::isa();
        let run = |regs: &mut Vec<Vec<f32>>, (start, mut slices): (usize, Vec<OutSlice<'_>>)| {
            run_task(c, (inputs, &direct), start, &mut slices, regs, isa);
        };
        if c.numel >= graphrw_kernels::broadcast::PAR_THRESHOLD {
            tasks.into_par_iter().for_each_init(fresh, run);
        } else {
            let mut regs = fresh();
            tasks.into_iter().for_each(|t| run(&mut regs, t));
        }
    }
    outs.into_iter().map(|o| o.into_tensor(shape)).collect()
}

fn run_task(
    c: &Compiled,
    (inputs, direct): (&[&Tensor], &[Option<&[f32]>]),
    start: usize,
    outs: &mut [OutSlice<'_>],
    regs: &mut [Vec<f32>],
    isa: graphrw_kernels::cpu::Isa,
) {
    let len = outs.first().map_or(0, out_len);
    for l in &c.loads {
        if let Load::Splat { reg, value } = *l {
            regs[reg].fill(value);
        }
    }
    let mut off = 0;
    while off < len {
        let n = TILE.min(len - off);
        let at = start + off;
        for (i, l) in c.loads.iter().enumerate() {
            if let Load::Gather {
                reg,
                shape,
                strides,
            } = l
            {
                gather(inputs[i], shape, strides, at, &mut regs[*reg][..n]);
            }
        }
        for s in &c.steps {
            let mut dst = std::mem::take(&mut regs[s.dst]);
            {
                // On the stack: a step has at most a few operands (no allocation per
                // step and tile).
                let src: smallvec::SmallVec<[&[f32]; 4]> = s
                    .src
                    .iter()
                    .map(|&x| match x {
                        Src::Reg(r) => &regs[r][..n],
                        Src::Direct(i) => &direct[i].expect("direct inputs are f32")[at..at + n],
                    })
                    .collect();
                apply(isa, s.op, &mut dst[..n], &src);
            }
            match s.round {
                Some(DType::F16) => dst[..n]
                    .iter_mut()
                    .for_each(|v| *v = f16::from_f32(*v).to_f32()),
                Some(DType::BF16) => dst[..n]
                    .iter_mut()
                    .for_each(|v| *v = bf16::from_f32(*v).to_f32()),
                _ => {}
            }
            regs[s.dst] = dst;
        }
        for (o, &(reg, _)) in outs.iter_mut().zip(&c.outputs) {
            let lanes = &regs[reg][..n];
            match o {
                OutSlice::F32(d) => d[off..off + n].copy_from_slice(lanes),
                OutSlice::F16(d) => d[off..off + n].convert_from_f32_slice(lanes),
                OutSlice::BF16(d) => d[off..off + n].convert_from_f32_slice(lanes),
                OutSlice::Bool(d) => {
                    for (d, &v) in d[off..off + n].iter_mut().zip(lanes) {
                        *d = v != 0.0;
                    }
                }
            }
        }
        off += n;
    }
}

fn out_len(o: &OutSlice<'_>) -> usize {
    match o {
        OutSlice::F32(d) => d.len(),
        OutSlice::F16(d) => d.len(),
        OutSlice::BF16(d) => d.len(),
        OutSlice::Bool(d) => d.len(),
    }
}

/// Fills `dst` with the elements at flat positions `start..start + dst.len()` of `t`
/// broadcast to a (collapsed) `shape` with element `strides`.
fn gather(t: &Tensor, shape: &[usize], strides: &[usize], start: usize, dst: &mut [f32]) {
    let conv_bool = |x: &bool| if *x { 1.0 } else { 0.0 };
    if let Ok(v) = t.as_slice::<f32>() {
        gather_as(v, shape, strides, start, dst, |x| *x)
    } else if let Ok(v) = t.as_slice::<f16>() {
        gather_as(v, shape, strides, start, dst, |x| x.to_f32())
    } else if let Ok(v) = t.as_slice::<bf16>() {
        gather_as(v, shape, strides, start, dst, |x| x.to_f32())
    } else if let Ok(v) = t.as_slice::<bool>() {
        gather_as(v, shape, strides, start, dst, conv_bool)
    } else {
        // The compiler admits lane dtypes only.
        dst.fill(f32::NAN)
    }
}

fn gather_as<T>(
    src: &[T],
    shape: &[usize],
    strides: &[usize],
    start: usize,
    dst: &mut [f32],
    conv: impl Fn(&T) -> f32,
) {
    let rank = shape.len();
    if rank == 0 {
        dst.fill(conv(&src[0]));
        return;
    }
    // Multi-index of `start`.
    let mut index = vec![0usize; rank];
    let mut rest = start;
    for d in (0..rank).rev() {
        index[d] = rest % shape[d];
        rest /= shape[d];
    }
    let inner = shape[rank - 1];
    let inner_stride = strides[rank - 1];
    let mut done = 0;
    while done < dst.len() {
        let base: usize = (0..rank - 1).map(|d| index[d] * strides[d]).sum();
        let run = (inner - index[rank - 1]).min(dst.len() - done);
        let first = base + index[rank - 1] * inner_stride;
        let out = &mut dst[done..done + run];
        match inner_stride {
            0 => out.fill(conv(&src[first])),
            1 => {
                for (o, x) in out.iter_mut().zip(&src[first..first + run]) {
                    *o = conv(x);
                }
            }
            s => {
                for (j, o) in out.iter_mut().enumerate() {
                    *o = conv(&src[first + j * s]);
                }
            }
        }
        done += run;
        index[rank - 1] += run;
        let mut d = rank - 1;
        while index[d] == shape[d] && d > 0 {
            index[d] = 0;
            index[d - 1] += 1;
            d -= 1;
        }
    }
}

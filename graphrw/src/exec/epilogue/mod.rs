//! The matmul epilogue executor: at plan time, a `matmul` whose only use is an `add` of
//! a bias along its columns, optionally followed by an activation (`relu`, `gelu` in
//! either form, `silu`, the generated `fused.gelu_tanh` the rules make of GPT-2's
//! written-out GELU, or the generated `fused.bias_gelu` that already holds the bias),
//! becomes one [`MATMUL_EPILOGUE`] node, run by
//! [`graphrw_kernels::cpu::matmul_epilogue_with`]: the GEMM accumulates onto the bias
//! and the activation runs in place, so the product is written once and no
//! intermediate is allocated. Two more forms fold into such a node:
//! - a `split` of its result along the last dim (a fused QKV projection, GPT-2's
//!   `c_attn`): one node per piece, each the product with a column range of the weight
//!   read in place (`columns`), so the pieces are written directly instead of copied
//!   out of the whole;
//! - a `reshape` of its result to `[.., S, H, D]` and the swap of `S` and `H`
//!   (`transpose`/`permute`) that gives attention its heads: one node that writes each
//!   head's product in place, head-major (`heads`), instead of a product and a
//!   transposing copy (f32/f64);
//! - an `add` of a tensor of the result's shape when there is no activation (the
//!   residual connection after an attention or MLP output projection): written into
//!   the result with the bias before the GEMM accumulates onto both (`residual`),
//!   instead of a pass of its own over two tensors.
//!
//! A product whose weight is a `transpose` (or `permute`) swapping the two dims of a
//! constant f32/f64 matrix (the LM head of a dynamo export with a tied embedding,
//! `matmul(h, transpose(wte))`) folds the swap in too (`weight_transposed`): the node
//! reads the constant `[N, K]` in place as `b^T` (the `gemm` crate through its strides,
//! the packed GEMM from a packing made straight from the transposed storage), so the
//! weight is never transposed at run time nor copied beyond its packing.
//!
//! This is an execution transform (Thunder's), not a rewrite of the user's graph: the
//! fused node exists only in the plan, so saving or printing the model is unaffected.
//! The node's decomposition (matmul, add, activation; slices of the weight and bias
//! for a column range) keeps it runnable by any other executor and gives its metadata.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use graphrw_kernels::cpu::{self, Activation, GemmBackend};
use graphrw_kernels::Tensor;

use super::executor::{Executor, KernelFailure, NodeView};
use super::ExecError;
use crate::builder::Builder;
use crate::graph::{Graph, NodeId, Value};
use crate::meta::{Device, Dim, SymExpr};
use crate::ops::builtin::{ADD, GELU, MATMUL, RELU, RESHAPE, SILU, SLICE, TRANSPOSE};
use crate::ops::{
    Arity, AttrDefault, AttrKind, AttrSpec, AttrValue, Attrs, GeluApproximation, Infer, OpClass,
    OpDef, OperandSpec, OutputCount,
};
use crate::GraphError;

mod fold;

use fold::{fold_epilogues, fuse_chains};

/// `act(a @ b[.., columns] + bias[columns] (+ residual))`: the node the epilogue
/// executor forms. Attribute `activation` is one of `none`, `relu`, `gelu`,
/// `gelu_tanh`, `silu`; `columns` is empty (all of `b`'s columns) or `[start, end]`;
/// the optional `residual` (a tensor of the result's shape) comes with activation
/// `none` only; `heads` > 0 writes the result head-major, `[.., H, S, N / H]` for `a`
/// of `[.., S, K]` (what `reshape` to `[.., S, H, N / H]` and `transpose(-3, -2)`
/// give); `weight_transposed` 1 means operand `b` is a matrix stored `[N, K]` and the
/// product is by its transpose (`b` in everything above stands for `b^T`).
pub static MATMUL_EPILOGUE: OpDef = OpDef {
    name: "fused.matmul_epilogue",
    doc: "`act(a @ b[.., columns] + bias[columns] (+ residual))` in one kernel (bias along the columns of the product).",
    operands: &[
        OperandSpec {
            name: "a",
            arity: Arity::Required,
        },
        OperandSpec {
            name: "b",
            arity: Arity::Required,
        },
        OperandSpec {
            name: "bias",
            arity: Arity::Required,
        },
        OperandSpec {
            name: "residual",
            arity: Arity::Optional,
        },
    ],
    attrs: &[
        AttrSpec {
            name: "activation",
            kind: AttrKind::Str,
            default: AttrDefault::Str(Activation::Identity.word()),
        },
        AttrSpec {
            name: "columns",
            kind: AttrKind::Ints,
            default: AttrDefault::Ints(&[]),
        },
        AttrSpec {
            name: "heads",
            kind: AttrKind::Int,
            default: AttrDefault::Int(0),
        },
        AttrSpec {
            name: "weight_transposed",
            kind: AttrKind::Int,
            default: AttrDefault::Int(0),
        },
    ],
    outputs: OutputCount::Fixed(1),
    commutative: false,
    class: OpClass::Other,
    infer: Infer::Like,
    decompose: Some(decompose_epilogue),
    builtin: None,
};

/// The name the epilogue executor shows in plans.
pub const EPILOGUE_CPU: &str = "cpu-matmul-epilogue";

/// Forms and runs [`MATMUL_EPILOGUE`] nodes on the CPU.
///
/// Each product picks its kernel through [`cpu::choice`]: by default the `gemm` crate
/// and the packed GEMM on each instruction set the CPU has are timed on the first
/// product of each shape and bucket of rows, and the fastest is kept (the plan's
/// [`KernelOptions::product_kernel`](graphrw_kernels::KernelOptions::product_kernel)
/// pins one or asks for the fixed rule instead). A weight whose product takes a packed
/// kernel is packed at its first run and reused by the runs after
/// ([`cpu::PackedWeight`]). A weight mapped from an external data file (every large
/// model's) gives its pages back as it is packed, so the process holds it about once,
/// packed, and such packings have no limit; the others (weights held in memory, which
/// packing copies) stop at [`PACKED_LIMIT`] bytes in all. Products of any number of
/// rows by an external weight use its packed copy rather than fault it in again. A packed copy whose weight
/// was dropped is dropped at the next packing.
/// [`KernelOptions::pack_weights`](graphrw_kernels::KernelOptions::pack_weights) off
/// (a plan's options) turns packing off (to compare, say).
#[derive(Debug, Default)]
pub struct EpilogueCpu {
    packed: Mutex<Vec<Arc<cpu::PackedWeight>>>,
}

/// The most bytes of packed weights an [`EpilogueCpu`] keeps, packings of weights
/// mapped from external data aside (past it, the `gemm` crate packs the weight on every
/// call). A 2-layer Gemma-2B-width model (1.1 GB of external weights) left its LM head
/// unpacked at this limit, where it ran at 63 GFLOP/s instead of 220.
pub const PACKED_LIMIT: usize = 1 << 30;

impl EpilogueCpu {
    /// Bytes of packed weights held now (0 where none were packed).
    pub fn packed_bytes(&self) -> usize {
        self.packed
            .lock()
            .map_or(0, |c| c.iter().map(|p| p.nbytes()).sum())
    }

    /// The kernel for the product of `a` by `columns` of weight `w`, with the packing
    /// it runs on: the kernel [`cpu::choice`] picks (by measurement on this CPU unless
    /// the options pin one or ask for the fixed rule), the packing kept from an earlier
    /// run or made now. A weight already packed is not packed a second time for
    /// another instruction set, and one mapped from external data whose pages were
    /// given back runs on its packing whatever kernel won (memory first). Where no
    /// packing is made (packing off, not f32, past [`PACKED_LIMIT`]), the `gemm` crate.
    ///
    /// With `transposed`, the product is by `w^T` (`w` stored `[N, K]`): chosen, kept
    /// and packed as such ([`cpu::PackedWeight::new_transposed`]), apart from any
    /// packing of `w` itself.
    fn kernel(
        &self,
        a: &Tensor,
        w: &Tensor,
        columns: Option<(usize, usize)>,
        transposed: bool,
    ) -> (cpu::choice::ProductKernel, Option<Arc<cpu::PackedWeight>>) {
        use cpu::choice::ProductKernel;
        let gemm = (ProductKernel::Gemm, None);
        let (k, n_all) = match (w.shape(), transposed) {
            (&[k, n_all], false) | (&[n_all, k], true) => (k, n_all),
            _ => return gemm,
        };
        // The plan's options, installed while it runs.
        let options = graphrw_kernels::KernelOptions::current();
        if !options.pack_weights || w.dtype() != graphrw_kernels::DType::F32 {
            return gemm;
        }
        let kernel = cpu::choice::global().kernel_for_as(a, w, columns, transposed, &options);
        let external = w.file_range().is_some_and(|r| !r.file.holds_model());
        let Ok(mut cache) = self.packed.lock() else {
            return gemm;
        };
        let kept = cache
            .iter()
            .find(|p| p.packs_as(w, columns, transposed))
            .cloned();
        // The AVX-512 kernel's two forms share a packing: a kept one runs either.
        let packed_kernel =
            |p: &cpu::PackedWeight| ProductKernel::packed(p.isa(), kernel.broadcast());
        let isa = match (kernel.packed_isa(), kept) {
            (Some(_), Some(p)) => return (packed_kernel(&p), Some(p)),
            (None, Some(p)) if external => return (packed_kernel(&p), Some(p)),
            (None, _) => return gemm,
            (Some(isa), None) => isa,
        };
        let (start, end) = columns.unwrap_or((0, n_all));
        let bytes = cpu::PackedWeight::size_for(k, end.saturating_sub(start));
        cache.retain(|p| !p.is_orphan());
        let held: usize = cache.iter().map(|p| p.nbytes()).sum();
        if !external && held + bytes > PACKED_LIMIT {
            return gemm;
        }
        let packed = if transposed {
            cpu::PackedWeight::new_transposed(w, columns, isa)
        } else {
            cpu::PackedWeight::new_any_depth(w, columns, isa)
        };
        match packed {
            Some(p) => {
                let p = Arc::new(p);
                cache.push(Arc::clone(&p));
                (kernel, Some(p))
            }
            None => gemm,
        }
    }
}

/// The column range of the `columns` attribute: `None` for all columns (empty list).
fn parse_columns(columns: &[i64]) -> Result<Option<(usize, usize)>, String> {
    match columns {
        [] => Ok(None),
        &[start, end] if 0 <= start && start < end => Ok(Some((start as usize, end as usize))),
        other => Err(format!(
            "`columns` must be empty or [start, end] with 0 <= start < end, got {other:?}"
        )),
    }
}

/// The `weight_transposed` attribute: 0 or 1.
fn parse_transposed(value: i64) -> Result<bool, String> {
    match value {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(format!("`weight_transposed` must be 0 or 1, got {other}")),
    }
}

/// The node's decomposition: the `transpose` of the weight where it is stored
/// transposed, `matmul` (with `slice`s of the weight and bias for a
/// column range), `add` of the bias (and of the residual), then the activation's
/// built-in op.
fn decompose_epilogue(b: &Builder, x: &[Value], attrs: &Attrs) -> Result<Vec<Value>, GraphError> {
    let infer_error = |message: String| GraphError::Infer {
        op: MATMUL_EPILOGUE.name,
        node: None,
        inputs: Vec::new(),
        message,
    };
    let (a, w, bias, residual) = match x {
        [a, w, bias] => (*a, *w, *bias, None),
        [a, w, bias, r] => (*a, *w, *bias, Some(*r)),
        _ => {
            return Err(infer_error(format!(
                "3 or 4 operands expected, got {}",
                x.len()
            )))
        }
    };
    let name = attrs.str("activation").map_err(|e| infer_error(e.0))?;
    let act = Activation::parse(name)
        .ok_or_else(|| infer_error(format!("unknown activation `{name}`")))?;
    let columns =
        parse_columns(attrs.ints("columns").map_err(|e| infer_error(e.0))?).map_err(infer_error)?;
    if residual.is_some() && act != Activation::Identity {
        return Err(infer_error(format!(
            "a residual comes with activation `none`, not `{name}`"
        )));
    }
    let w = match parse_transposed(
        attrs
            .int("weight_transposed")
            .map_err(|e| infer_error(e.0))?,
    )
    .map_err(infer_error)?
    {
        false => w,
        true => b.apply(
            &TRANSPOSE,
            &[w],
            &[("dim0", AttrValue::Int(-2)), ("dim1", AttrValue::Int(-1))],
        )?[0],
    };
    let (w, bias) = match columns {
        None => (w, bias),
        Some((start, end)) => {
            let slice = |v: Value| {
                b.apply(
                    &SLICE,
                    &[v],
                    &[
                        ("dim", AttrValue::Int(-1)),
                        ("start", AttrValue::Int(start as i64)),
                        ("end", AttrValue::Int(end as i64)),
                    ],
                )
                .map(|out| out[0])
            };
            (slice(w)?, slice(bias)?)
        }
    };
    let y = b.apply(&MATMUL, &[a, w], &[])?[0];
    let mut y = b.apply(&ADD, &[y, bias], &[])?[0];
    if let Some(r) = residual {
        y = b.apply(&ADD, &[y, r], &[])?[0];
    }
    let out = match act {
        Activation::Identity => y,
        Activation::Relu => b.apply(&RELU, &[y], &[])?[0],
        Activation::Gelu => b.apply(
            &GELU,
            &[y],
            &[(
                "approximate",
                AttrValue::Str(GeluApproximation::None.word().into()),
            )],
        )?[0],
        Activation::GeluTanh => b.apply(
            &GELU,
            &[y],
            &[(
                "approximate",
                AttrValue::Str(GeluApproximation::Tanh.word().into()),
            )],
        )?[0],
        Activation::Silu => b.apply(&SILU, &[y], &[])?[0],
    };
    let heads = attrs.int("heads").map_err(|e| infer_error(e.0))?;
    if heads <= 0 {
        return Ok(vec![out]);
    }
    // `[.., S, N]` -> `[.., S, H, N / H]` -> `[.., H, S, N / H]`; the leading dims may
    // be symbolic (a batch and a sequence bound at run time).
    let meta = b.var(out).meta()?;
    let dims = meta.shape.dims();
    let n = dims
        .last()
        .and_then(Dim::known)
        .and_then(|n| i64::try_from(n).ok())
        .ok_or_else(|| infer_error(format!("heads need a known width, the product is {meta}")))?;
    let lead = &dims[..dims.len() - 1];
    if lead.is_empty() || n % heads != 0 {
        return Err(infer_error(format!(
            "{heads} heads of a product of shape {}",
            meta.shape
        )));
    }
    let mut split: Vec<SymExpr> = lead.iter().map(Dim::to_expr).collect();
    split.extend([SymExpr::int(heads), SymExpr::int(n / heads)]);
    let y = b.apply(&RESHAPE, &[out], &[("shape", AttrValue::sym_ints(split))])?[0];
    let y = b.apply(
        &TRANSPOSE,
        &[y],
        &[("dim0", AttrValue::Int(-3)), ("dim1", AttrValue::Int(-2))],
    )?[0];
    Ok(vec![y])
}

impl Executor for EpilogueCpu {
    fn name(&self) -> &str {
        EPILOGUE_CPU
    }

    fn check(&self, node: &NodeView<'_>) -> Result<(), String> {
        if !std::ptr::eq(node.op, &MATMUL_EPILOGUE) {
            return Err(format!(
                "runs `{}` nodes only (it forms them from matmul + bias + activation)",
                MATMUL_EPILOGUE.name
            ));
        }
        if let Some(m) = node.inputs.iter().find(|m| m.device != Device::Cpu) {
            return Err(format!("operand on {}, not the CPU", m.device));
        }
        if !node.inputs[0].dtype.is_float() {
            return Err(format!("no GEMM for {}", node.inputs[0].dtype));
        }
        let word = node.attrs.str("activation").map_err(|e| e.0)?;
        let act = Activation::parse(word).ok_or_else(|| format!("unknown activation `{word}`"))?;
        parse_columns(node.attrs.ints("columns").map_err(|e| e.0)?)?;
        // What the kernel refuses is left to the node's decomposition.
        let residual = node.inputs.len() > 3;
        if residual && act != Activation::Identity {
            return Err(format!("a residual with activation `{word}`"));
        }
        let transposed = parse_transposed(node.attrs.int("weight_transposed").map_err(|e| e.0)?)?;
        if transposed && node.inputs[1].rank() != 2 {
            return Err("a transposed weight must be a matrix".into());
        }
        let heads = node.attrs.int("heads").map_err(|e| e.0)?;
        if heads > 0 && (residual || node.inputs[0].rank() < 2 || node.inputs[1].rank() != 2) {
            return Err("heads need a weight matrix, `a` of rank 2 or more and no residual".into());
        }
        Ok(())
    }

    fn transform_graph(
        &self,
        graph: &mut Graph,
        movable: &dyn Fn(NodeId) -> bool,
    ) -> Result<bool, ExecError> {
        let chains = fuse_chains(graph, movable)?;
        Ok(fold_epilogues(graph, movable)? || chains)
    }

    fn run(&self, node: &NodeView<'_>, x: &[&Tensor]) -> Result<Vec<Tensor>, KernelFailure> {
        let name = node.attrs.str("activation")?;
        let activation =
            Activation::parse(name).ok_or_else(|| format!("unknown activation `{name}`"))?;
        let columns = parse_columns(node.attrs.ints("columns")?)?;
        let (a, w, bias, residual) = match x {
            [a, w, bias] => (*a, *w, *bias, None),
            [a, w, bias, r] => (*a, *w, *bias, Some(*r)),
            _ => return Err(format!("3 or 4 operands expected, got {}", x.len()).into()),
        };
        let heads = node.attrs.int("heads")?;
        let transposed = parse_transposed(node.attrs.int("weight_transposed")?)?;
        let (kernel, packed) = self.kernel(a, w, columns, transposed);
        let epilogue = cpu::Epilogue {
            bias: Some(bias),
            activation,
            columns,
            residual,
            heads: (heads > 0).then_some(heads as usize),
            packed: packed.as_deref(),
            transposed,
            broadcast: kernel.broadcast(),
        };
        let started = Instant::now();
        let out = cpu::matmul_epilogue_with(a, w, &epilogue, GemmBackend::Auto)?;
        if let (&[k, n_all], false) | (&[n_all, k], true) = (w.shape(), transposed) {
            let n = columns.map_or(n_all, |(start, end)| end - start);
            let rows = a.numel() / k.max(1);
            cpu::choice::global().record((rows, k, n), kernel, started.elapsed());
        }
        Ok(vec![out])
    }
}

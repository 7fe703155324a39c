//! The matmul epilogue executor: at plan time, a `matmul` whose only use is an `add` of
//! a bias along its columns, optionally followed by an activation (`relu`, `gelu` in
//! either form, `silu`, or the generated `fused.bias_gelu` that already holds the
//! bias), becomes one [`MATMUL_EPILOGUE`] node, run by
//! [`graphrw_kernels::cpu::matmul_epilogue`]: the GEMM accumulates onto the bias and
//! the activation runs in place, so the product is written once and no intermediate is
//! allocated.
//!
//! This is an execution transform (Thunder's), not a rewrite of the user's graph: the
//! fused node exists only in the plan, so saving or printing the model is unaffected.
//! The node's decomposition (matmul, add, activation) keeps it runnable by any other
//! executor and gives its metadata.

use std::collections::HashMap;

use graphrw_kernels::cpu::{self, Activation, GemmBackend};
use graphrw_kernels::Tensor;

use super::executor::{Executor, KernelFailure, NodeView};
use super::ExecError;
use crate::builder::Builder;
use crate::graph::{Graph, NodeId, Value};
use crate::meta::Device;
use crate::ops::builtin::{ADD, GELU, MATMUL, RELU, SILU};
use crate::ops::{
    Arity, AttrDefault, AttrKind, AttrSpec, AttrValue, Attrs, Infer, OpClass, OpDef, OperandSpec,
    OutputCount,
};
use crate::GraphError;

/// `act(a @ b + bias)`: the node the epilogue executor forms. Attribute `activation`
/// is one of `none`, `relu`, `gelu`, `gelu_tanh`, `silu`.
pub static MATMUL_EPILOGUE: OpDef = OpDef {
    name: "fused.matmul_epilogue",
    doc: "`act(a @ b + bias)` in one kernel (bias along the columns of the product).",
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
    ],
    attrs: &[AttrSpec {
        name: "activation",
        kind: AttrKind::Str,
        default: AttrDefault::Str("none"),
    }],
    outputs: OutputCount::Fixed(1),
    commutative: false,
    class: OpClass::Other,
    infer: Infer::Like,
    decompose: Some(decompose_epilogue),
};

/// The name the epilogue executor shows in plans.
pub const EPILOGUE_CPU: &str = "cpu-matmul-epilogue";

/// Forms and runs [`MATMUL_EPILOGUE`] nodes on the CPU.
#[derive(Clone, Copy, Debug, Default)]
pub struct EpilogueCpu;

/// The activation named by the `activation` attribute.
fn parse_activation(name: &str) -> Option<Activation> {
    Some(match name {
        "none" => Activation::Identity,
        "relu" => Activation::Relu,
        "gelu" => Activation::Gelu,
        "gelu_tanh" => Activation::GeluTanh,
        "silu" => Activation::Silu,
        _ => return None,
    })
}

/// The node's decomposition: `matmul`, `add`, then the activation's built-in op.
fn decompose_epilogue(b: &Builder, x: &[Value], attrs: &Attrs) -> Result<Vec<Value>, GraphError> {
    let infer_error = |message: String| GraphError::Infer {
        op: MATMUL_EPILOGUE.name,
        node: None,
        inputs: Vec::new(),
        message,
    };
    let [a, w, bias] = x else {
        return Err(infer_error(format!("3 operands expected, got {}", x.len())));
    };
    let name = attrs.str("activation").map_err(|e| infer_error(e.0))?;
    let act = parse_activation(name)
        .ok_or_else(|| infer_error(format!("unknown activation `{name}`")))?;
    let y = b.apply(&MATMUL, &[*a, *w], &[])?[0];
    let y = b.apply(&ADD, &[y, *bias], &[])?[0];
    let out = match act {
        Activation::Identity => y,
        Activation::Relu => b.apply(&RELU, &[y], &[])?[0],
        Activation::Gelu => b.apply(
            &GELU,
            &[y],
            &[("approximate", AttrValue::Str("none".into()))],
        )?[0],
        Activation::GeluTanh => b.apply(
            &GELU,
            &[y],
            &[("approximate", AttrValue::Str("tanh".into()))],
        )?[0],
        Activation::Silu => b.apply(&SILU, &[y], &[])?[0],
    };
    Ok(vec![out])
}

/// The single user of `v` (not a graph output), if it has exactly one use.
fn only_user(g: &Graph, v: Value) -> Option<(NodeId, u32)> {
    if g.is_output(v) || g.use_count(v) != 1 {
        return None;
    }
    g.uses_sorted(v).into_iter().next()
}

/// A chain found in the graph: the nodes it replaces (in order), the operands of the
/// fused node and its activation.
struct Chain {
    nodes: Vec<NodeId>,
    operands: [Value; 3],
    activation: &'static str,
}

/// The activation of node `id` when it is one the epilogue runs.
fn activation_of(g: &Graph, id: NodeId) -> Option<&'static str> {
    let node = g.node(id)?;
    match node.op_name() {
        "relu" => Some("relu"),
        "silu" => Some("silu"),
        "gelu" => match node.attrs().str("approximate").ok()? {
            "none" => Some("gelu"),
            "tanh" => Some("gelu_tanh"),
            _ => None,
        },
        _ => None,
    }
}

/// Whether `bias` runs along the `n` columns of the product `m` (same dtype, `n`
/// elements, every other dim 1), so that `m + bias` keeps `m`'s shape.
fn is_column_bias(g: &Graph, product: Value, bias: Value) -> bool {
    let (Ok(pm), Ok(bm)) = (g.meta(product), g.meta(bias)) else {
        return false;
    };
    let (Some(pd), Some(bd)) = (pm.shape.as_known(), bm.shape.as_known()) else {
        return false;
    };
    let Some(&n) = pd.last() else {
        return false;
    };
    bm.dtype == pm.dtype
        && bm.device == Device::Cpu
        && !bd.is_empty()
        && bd.len() <= pd.len()
        && bd.last() == Some(&n)
        && bd[..bd.len() - 1].iter().all(|&d| d == 1)
}

/// The chain anchored at `matmul` node `id`, if one is there and every node of it may
/// move to this executor.
fn chain_at(g: &Graph, id: NodeId, movable: &dyn Fn(NodeId) -> bool) -> Option<Chain> {
    let node = g.node(id)?;
    if !std::ptr::eq(node.op(), &MATMUL) || !movable(id) {
        return None;
    }
    let out = node.outputs().first()?;
    let (a, w) = (*node.operands().first()?, *node.operands().get(1)?);
    let (am, wm) = (g.meta(a).ok()?, g.meta(w).ok()?);
    if !out.dtype.is_float() || out.device != Device::Cpu || am.rank() < 2 || wm.rank() < 2 {
        return None;
    }
    let product = Value::new(id, 0);
    let (user, slot) = only_user(g, product)?;
    if !movable(user) {
        return None;
    }
    let unode = g.node(user)?;
    let bias = *unode.operands().get(1 - slot as usize)?;
    match unode.op_name() {
        "add" if unode.operands().len() == 2 && is_column_bias(g, product, bias) => {}
        // The generated bias + GELU (erf form) holds the bias itself: `x` is operand 0.
        "fused.bias_gelu" if slot == 0 && is_column_bias(g, product, bias) => {
            return Some(Chain {
                nodes: vec![id, user],
                operands: [a, w, bias],
                activation: "gelu",
            });
        }
        _ => return None,
    }
    let mut chain = Chain {
        nodes: vec![id, user],
        operands: [a, w, bias],
        activation: "none",
    };
    if let Some((act_node, _)) = only_user(g, Value::new(user, 0)) {
        if movable(act_node) {
            if let Some(act) = activation_of(g, act_node) {
                chain.nodes.push(act_node);
                chain.activation = act;
            }
        }
    }
    Some(chain)
}

/// Replaces every epilogue chain of movable nodes by one [`MATMUL_EPILOGUE`] node.
fn fuse_chains(g: &mut Graph, movable: &dyn Fn(NodeId) -> bool) -> Result<bool, ExecError> {
    let chains: Vec<Chain> = g
        .topo_order()?
        .into_iter()
        .filter_map(|id| chain_at(g, id, movable))
        .collect();
    let changed = !chains.is_empty();
    // A chain may read the result of an earlier one (an MLP's second matmul reads the
    // first one's activation), replaced by then: operands are renamed as they go.
    let mut renamed: HashMap<Value, Value> = HashMap::new();
    for chain in chains {
        let Some(&last) = chain.nodes.last() else {
            continue;
        };
        let old = Value::new(last, 0);
        let attrs = vec![AttrValue::Str(chain.activation.to_string())];
        let operands: Vec<Value> = chain
            .operands
            .iter()
            .map(|v| *renamed.get(v).unwrap_or(v))
            .collect();
        let id = g.add_node(&MATMUL_EPILOGUE, operands, attrs, None)?;
        let new = Value::new(id, 0);
        if g.meta(new)? != g.meta(old)? {
            let message = format!(
                "the fused node's output became {}, the chain's is {}",
                g.meta(new)?,
                g.meta(old)?
            );
            g.remove_node(id)?;
            return Err(ExecError::Transform {
                op: MATMUL_EPILOGUE.name,
                message,
            });
        }
        g.replace_all_uses(old, new)?;
        renamed.insert(old, new);
        for &n in chain.nodes.iter().rev() {
            g.remove_node(n)?;
        }
    }
    Ok(changed)
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
        let act = node.attrs.str("activation").map_err(|e| e.0)?;
        if parse_activation(act).is_none() {
            return Err(format!("unknown activation `{act}`"));
        }
        Ok(())
    }

    fn transform_graph(
        &self,
        graph: &mut Graph,
        movable: &dyn Fn(NodeId) -> bool,
    ) -> Result<bool, ExecError> {
        fuse_chains(graph, movable)
    }

    fn run(&self, node: &NodeView<'_>, x: &[&Tensor]) -> Result<Vec<Tensor>, KernelFailure> {
        let name = node.attrs.str("activation")?;
        let act = parse_activation(name).ok_or_else(|| format!("unknown activation `{name}`"))?;
        let [a, w, bias] = x else {
            return Err(format!("3 operands expected, got {}", x.len()).into());
        };
        Ok(vec![cpu::matmul_epilogue(
            a,
            w,
            Some(bias),
            act,
            GemmBackend::Auto,
        )?])
    }
}

//! The graph transform of the epilogue executor: finds the `matmul` chains (bias,
//! activation, a transposed constant weight) and forms their [`MATMUL_EPILOGUE`] nodes,
//! then folds a `split`, a head reshape and transpose, or a residual `add` of their
//! result into them (the module docs of `epilogue` say which forms).

use std::collections::HashMap;

use graphrw_kernels::cpu::Activation;
use graphrw_kernels::Tensor;

use super::MATMUL_EPILOGUE;
use crate::exec::ExecError;
use crate::graph::{Graph, NodeId, Value};
use crate::meta::{Device, Dim};
use crate::ops::builtin::{ADD, MATMUL, RESHAPE, SPLIT};
use crate::ops::{AttrValue, GeluApproximation, Op};

/// The single user of `v` (not a graph output), if it has exactly one use.
fn only_user(g: &Graph, v: Value) -> Option<(NodeId, u32)> {
    if g.is_output(v) || g.use_count(v) != 1 {
        return None;
    }
    g.uses_sorted(v).into_iter().next()
}

/// A chain found in the graph: the nodes it replaces (in order), the product's operands,
/// its bias (none: a product by a constant weight alone, given a zero bias) and its
/// activation.
struct Chain {
    nodes: Vec<NodeId>,
    a: Value,
    w: Value,
    bias: Option<Value>,
    activation: Activation,
    /// The `transpose`/`permute` node whose constant operand `w` is (the product is by
    /// `w^T`): removed once no other node reads it.
    transpose: Option<NodeId>,
}

/// The constant matrix whose transpose `w` is, with the swap's node: where `w` is the
/// only result of a `transpose` or `permute` swapping the two dims of a constant f32
/// or f64 matrix on the CPU (the weights the kernel reads in place) and that node may
/// move to this executor.
fn transposed_constant(
    g: &Graph,
    w: Value,
    movable: &dyn Fn(NodeId) -> bool,
) -> Option<(Value, NodeId)> {
    let node = g.node(w.node)?;
    let &[src] = node.operands() else {
        return None;
    };
    let sm = g.meta(src).ok()?;
    let float = matches!(sm.dtype, crate::meta::DType::F32 | crate::meta::DType::F64);
    let constant = g.node(src.node)?.payload().is_some();
    if sm.rank() != 2 || !float || sm.device != Device::Cpu || !constant || !movable(w.node) {
        return None;
    }
    let norm = |d: i64| if d < 0 { d + 2 } else { d };
    let swaps = match node.builtin()? {
        Op::Transpose => {
            let (a, b) = (
                norm(node.attrs().int("dim0").ok()?),
                norm(node.attrs().int("dim1").ok()?),
            );
            (a, b) == (0, 1) || (a, b) == (1, 0)
        }
        Op::Permute => node
            .attrs()
            .ints("dims")
            .ok()
            .is_some_and(|dims| dims.len() == 2 && norm(dims[0]) == 1 && norm(dims[1]) == 0),
        _ => false,
    };
    swaps.then_some((src, w.node))
}

/// The last dim of `v` where it is known (a product's width).
fn width(g: &Graph, v: Value) -> Option<usize> {
    let m = g.meta(v).ok()?;
    let last = m.shape.dims().last()?.known()?;
    usize::try_from(last).ok()
}

/// The chain of a product by a constant 2-D weight with no bias after it (a language
/// model's head): the epilogue runs it with a zero bias, so that the weight is packed
/// like every other layer's. `None` for other products.
fn bare_product(g: &Graph, id: NodeId, a: Value, w: Value, transposed: bool) -> Option<Chain> {
    let wm = g.meta(w).ok()?;
    // A transposed constant (`transposed_constant`) is one too.
    let constant = transposed || g.node(w.node)?.payload().is_some();
    // The zero bias needs the product's width.
    let width_known = width(g, Value::new(id, 0)).is_some();
    (constant && wm.rank() == 2 && width_known).then(|| Chain {
        nodes: vec![id],
        a,
        w,
        bias: None,
        activation: Activation::Identity,
        transpose: None,
    })
}

/// The activation of node `id` when it is one the epilogue runs.
fn activation_of(g: &Graph, id: NodeId) -> Option<Activation> {
    let node = g.node(id)?;
    // The generated tanh GELU (GPT-2's written-out form, which the rules fuse) is
    // recognised by its op definition. (A written-out erf GELU after a bias becomes
    // `fused.bias_gelu`, which `chain_at` takes.)
    if std::ptr::eq(node.op(), &crate::generated::builtin::gelu_tanh::OP) {
        return Some(Activation::GeluTanh);
    }
    match node.builtin()? {
        Op::Relu => Some(Activation::Relu),
        Op::Silu => Some(Activation::Silu),
        Op::Gelu => Some(match node.attrs().gelu_approximation().ok()? {
            GeluApproximation::None => Activation::Gelu,
            GeluApproximation::Tanh => Activation::GeluTanh,
        }),
        _ => None,
    }
}

/// Whether `bias` runs along the `n` columns of the product `m` (same dtype, `n`
/// elements, every other dim 1), so that `m + bias` keeps `m`'s shape.
fn is_column_bias(g: &Graph, product: Value, bias: Value) -> bool {
    let (Ok(pm), Ok(bm)) = (g.meta(product), g.meta(bias)) else {
        return false;
    };
    // The product's leading dims may be symbolic; its width and the bias are known.
    let (pd, Some(bd)) = (pm.shape.dims(), bm.shape.as_known()) else {
        return false;
    };
    let Some(n) = pd.last().and_then(Dim::known) else {
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
    let transposed = transposed_constant(g, w, movable);
    chain_from(g, id, (a, w), transposed.is_some(), movable).map(|mut chain| {
        if let Some((src, swap)) = transposed {
            chain.w = src;
            chain.transpose = Some(swap);
        }
        chain
    })
}

/// The chain of [`chain_at`] from product node `id` of `a` by `w` (`transposed`: the
/// transpose of a constant matrix, which [`chain_at`] puts in its place).
fn chain_from(
    g: &Graph,
    id: NodeId,
    (a, w): (Value, Value),
    transposed: bool,
    movable: &dyn Fn(NodeId) -> bool,
) -> Option<Chain> {
    let product = Value::new(id, 0);
    let Some((user, slot)) = only_user(g, product).filter(|&(user, _)| movable(user)) else {
        return bare_product(g, id, a, w, transposed);
    };
    let unode = g.node(user)?;
    let Some(&bias) = unode.operands().get(1usize.checked_sub(slot as usize)?) else {
        return bare_product(g, id, a, w, transposed);
    };
    let bias_gelu = std::ptr::eq(unode.op(), &crate::generated::builtin::bias_gelu::OP);
    match unode.builtin() {
        Some(Op::Add) if unode.operands().len() == 2 && is_column_bias(g, product, bias) => {}
        // The generated bias + GELU (erf form) holds the bias itself: `x` is operand 0.
        None if bias_gelu && slot == 0 && is_column_bias(g, product, bias) => {
            return Some(Chain {
                nodes: vec![id, user],
                a,
                w,
                bias: Some(bias),
                activation: Activation::Gelu,
                transpose: None,
            });
        }
        _ => return bare_product(g, id, a, w, transposed),
    }
    let mut chain = Chain {
        nodes: vec![id, user],
        a,
        w,
        bias: Some(bias),
        activation: Activation::Identity,
        transpose: None,
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
pub(super) fn fuse_chains(
    g: &mut Graph,
    movable: &dyn Fn(NodeId) -> bool,
) -> Result<bool, ExecError> {
    let chains: Vec<Chain> = g
        .topo_order()?
        .into_iter()
        .filter_map(|id| chain_at(g, id, movable))
        .collect();
    let mut changed = false;
    // A chain may read the result of an earlier one (an MLP's second matmul reads the
    // first one's activation), replaced by then: operands are renamed as they go.
    let mut renamed: HashMap<Value, Value> = HashMap::new();
    // The swaps of transposed weights folded into nodes (several products may read one).
    let mut swaps: Vec<NodeId> = Vec::new();
    for chain in chains {
        let Some(&last) = chain.nodes.last() else {
            continue;
        };
        let old = Value::new(last, 0);
        let attrs = vec![
            AttrValue::Str(chain.activation.word().to_string()),
            AttrValue::Ints(Vec::new()),
            AttrValue::Int(0),
            AttrValue::Int(i64::from(chain.transpose.is_some())),
        ];
        if let Some(swap) = chain.transpose {
            swaps.push(swap);
        }
        let rename = |v: Value| *renamed.get(&v).unwrap_or(&v);
        let bias = match chain.bias {
            Some(bias) => rename(bias),
            // Never looked up in `renamed`: a new node may take the slot of a removed one.
            None => {
                let dtype = g.meta(old)?.dtype;
                let Some(n) = width(g, old) else {
                    continue;
                };
                g.add_constant(Tensor::zeros(dtype, &[n]))
            }
        };
        let operands = vec![rename(chain.a), rename(chain.w), bias];
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
        changed = true;
        for &n in chain.nodes.iter().rev() {
            g.remove_node(n)?;
        }
    }
    // A swap no node reads any more goes; one still read elsewhere stays for them.
    swaps.sort_unstable_by_key(|id| id.index());
    swaps.dedup();
    for swap in swaps {
        let out = Value::new(swap, 0);
        if g.node(swap).is_some() && g.use_count(out) == 0 && !g.is_output(out) {
            g.remove_node(swap)?;
        }
    }
    Ok(changed)
}

/// Whether `id` is an epilogue node on the CPU (the only device this executor runs).
fn cpu_epilogue(g: &Graph, id: NodeId) -> bool {
    g.node(id).is_some_and(|n| {
        std::ptr::eq(n.op(), &MATMUL_EPILOGUE)
            && n.outputs().first().is_some_and(|m| m.device == Device::Cpu)
    })
}

/// Whether `id` is a CPU epilogue node with no residual that writes its result in
/// the product's layout (no heads): what [`fold_heads`] and [`fold_residual`] take.
fn bare_epilogue(g: &Graph, id: NodeId) -> bool {
    cpu_epilogue(g, id)
        && g.node(id)
            .is_some_and(|n| n.operands().len() == 3 && n.attrs().int("heads") == Ok(0))
}

/// Whether `id` is a bare epilogue node over every column: the form the chains above
/// make, before any fold touches it (what [`fold_split`] takes).
fn whole_epilogue(g: &Graph, id: NodeId) -> bool {
    bare_epilogue(g, id)
        && g.node(id)
            .is_some_and(|n| n.attrs().ints("columns").is_ok_and(|c| c.is_empty()))
}

/// The pieces of a `split` along the last dim that is the only use of epilogue node
/// `id`'s result, as column ranges (with the split node), if every piece is non-empty
/// and the split may move to this executor.
fn split_of(
    g: &Graph,
    id: NodeId,
    movable: &dyn Fn(NodeId) -> bool,
) -> Option<(NodeId, Vec<(usize, usize)>)> {
    let out = Value::new(id, 0);
    let (user, _) = only_user(g, out)?;
    let split = g.node(user)?;
    if !std::ptr::eq(split.op(), &SPLIT) || !movable(user) {
        return None;
    }
    let (rank, n) = (g.meta(out).ok()?.rank() as i64, width(g, out)? as u64);
    let dim = split.attrs().int("dim").ok()?;
    if dim != rank - 1 && dim != -1 {
        return None;
    }
    let mut pieces = Vec::new();
    let mut start = 0usize;
    for &size in split.attrs().ints("split_sizes").ok()? {
        let size = usize::try_from(size).ok().filter(|&s| s > 0)?;
        pieces.push((start, start + size));
        start += size;
    }
    (start as u64 == n && pieces.len() == split.outputs().len()).then_some((user, pieces))
}

/// Replaces epilogue node `id` and the `split` of its result by one epilogue node
/// per used piece, each the product with that column range of the weight.
fn fold_split(
    g: &mut Graph,
    id: NodeId,
    movable: &dyn Fn(NodeId) -> bool,
) -> Result<bool, ExecError> {
    if !whole_epilogue(g, id) {
        return Ok(false);
    }
    let Some((split, pieces)) = split_of(g, id, movable) else {
        return Ok(false);
    };
    let (operands, activation, transposed) = {
        let node = g.node(id).ok_or_else(|| gone(id))?;
        let act = node
            .attrs()
            .str("activation")
            .map_err(|e| transform_error(e.0))?;
        let transposed = node
            .attrs()
            .int("weight_transposed")
            .map_err(|e| transform_error(e.0))?;
        (node.operands().to_vec(), act.to_string(), transposed)
    };
    for (i, &(start, end)) in pieces.iter().enumerate() {
        let old = Value::new(split, i as u32);
        if g.use_count(old) == 0 && !g.is_output(old) {
            continue;
        }
        let attrs = vec![
            AttrValue::Str(activation.clone()),
            AttrValue::Ints(vec![start as i64, end as i64]),
            AttrValue::Int(0),
            AttrValue::Int(transposed),
        ];
        let piece = g.add_node(&MATMUL_EPILOGUE, operands.clone(), attrs, None)?;
        replace_checked(g, old, Value::new(piece, 0))?;
    }
    g.remove_node(split)?;
    g.remove_node(id)?;
    Ok(true)
}

/// Folds the `add` that is the only use of epilogue node `id`'s result into it as its
/// residual, when the node has no activation and the other addend has the result's
/// metadata (no broadcast) and lives on the CPU.
fn fold_residual(
    g: &mut Graph,
    id: NodeId,
    movable: &dyn Fn(NodeId) -> bool,
) -> Result<bool, ExecError> {
    let Some(node) = g.node(id) else {
        return Ok(false);
    };
    if !bare_epilogue(g, id)
        || node.attrs().str("activation").ok() != Some(Activation::Identity.word())
    {
        return Ok(false);
    }
    let out = Value::new(id, 0);
    let Some((user, slot)) = only_user(g, out) else {
        return Ok(false);
    };
    let Some(add) = g.node(user) else {
        return Ok(false);
    };
    if !std::ptr::eq(add.op(), &ADD) || add.operands().len() != 2 || !movable(user) {
        return Ok(false);
    }
    let residual = add.operands()[1 - slot as usize];
    let (Ok(rm), Ok(om)) = (g.meta(residual), g.meta(out)) else {
        return Ok(false);
    };
    // Equal metadata, symbolic dims included (equal dims are equal sizes at run time).
    if residual == out || rm != om || rm.device != Device::Cpu {
        return Ok(false);
    }
    let mut operands = node.operands().to_vec();
    operands.push(residual);
    let attrs = node.attr_values().to_vec();
    let fused = g.add_node(&MATMUL_EPILOGUE, operands, attrs, None)?;
    replace_checked(g, Value::new(user, 0), Value::new(fused, 0))?;
    g.remove_node(user)?;
    g.remove_node(id)?;
    Ok(true)
}

/// The head count of a `reshape` of epilogue node `id`'s result from `[.., S, N]` to
/// `[.., S, H, N / H]` followed by a swap of its `S` and `H` dims (`transpose` or
/// `permute`), each the only use of the one before: `(H, the swap node)`.
fn heads_of(g: &Graph, id: NodeId, movable: &dyn Fn(NodeId) -> bool) -> Option<(i64, NodeId)> {
    let out = Value::new(id, 0);
    let dims = g.meta(out).ok()?.shape.dims().to_vec();
    let (reshape, _) = only_user(g, out)?;
    let rnode = g.node(reshape)?;
    if !std::ptr::eq(rnode.op(), &RESHAPE) || !movable(reshape) {
        return None;
    }
    // The leading dims (batch, sequence) may be symbolic, and must be the same dims
    // after the reshape; the width, the heads and the head size are known.
    let split = g.meta(Value::new(reshape, 0)).ok()?.shape.dims().to_vec();
    let r = dims.len();
    if r < 2 || split.len() != r + 1 || split[..r - 1] != dims[..r - 1] {
        return None;
    }
    let (n, heads, d) = (
        dims[r - 1].known()?,
        split[r - 1].known()?,
        split[r].known()?,
    );
    if heads == 0 || heads.checked_mul(d) != Some(n) {
        return None;
    }
    let (swap, _) = only_user(g, Value::new(reshape, 0))?;
    let snode = g.node(swap)?;
    if !movable(swap) {
        return None;
    }
    let rank = (r + 1) as i64;
    let norm = |d: i64| if d < 0 { d + rank } else { d };
    let (s_dim, h_dim) = (rank - 3, rank - 2);
    let swaps = match snode.builtin()? {
        Op::Transpose => {
            let (a, b) = (
                norm(snode.attrs().int("dim0").ok()?),
                norm(snode.attrs().int("dim1").ok()?),
            );
            (a, b) == (s_dim, h_dim) || (a, b) == (h_dim, s_dim)
        }
        Op::Permute => {
            let dims = snode.attrs().ints("dims").ok()?;
            dims.len() == r + 1
                && dims.iter().enumerate().all(|(i, &p)| {
                    let i = i as i64;
                    let want = if i == s_dim {
                        h_dim
                    } else if i == h_dim {
                        s_dim
                    } else {
                        i
                    };
                    norm(p) == want
                })
        }
        _ => false,
    };
    swaps.then_some((heads as i64, swap))
}

/// Folds the head split after epilogue node `id` (see [`heads_of`]) into it: one node
/// that writes the result head-major. f32 and f64 only (the products read `b` in
/// place; an f16/bf16 weight would be converted whole for each node), and a weight
/// matrix only (rank 2, as the kernel requires).
fn fold_heads(
    g: &mut Graph,
    id: NodeId,
    movable: &dyn Fn(NodeId) -> bool,
) -> Result<bool, ExecError> {
    let Some(node) = g.node(id) else {
        return Ok(false);
    };
    let f32_or_f64 = node
        .outputs()
        .first()
        .is_some_and(|m| matches!(m.dtype, crate::meta::DType::F32 | crate::meta::DType::F64));
    // The kernel writes heads for a weight matrix only (no batch of weights).
    let weight_matrix = node
        .operands()
        .get(1)
        .and_then(|&w| g.meta(w).ok())
        .is_some_and(|m| m.rank() == 2);
    if !bare_epilogue(g, id) || !f32_or_f64 || !weight_matrix {
        return Ok(false);
    }
    let Some((heads, swap)) = heads_of(g, id, movable) else {
        return Ok(false);
    };
    let operands = node.operands().to_vec();
    let mut attrs = node.attr_values().to_vec();
    if let Some(h) = attrs.get_mut(2) {
        *h = AttrValue::Int(heads);
    }
    let reshape = only_user(g, Value::new(id, 0)).map(|(r, _)| r);
    let fused = g.add_node(&MATMUL_EPILOGUE, operands, attrs, None)?;
    replace_checked(g, Value::new(swap, 0), Value::new(fused, 0))?;
    g.remove_node(swap)?;
    if let Some(reshape) = reshape {
        g.remove_node(reshape)?;
    }
    g.remove_node(id)?;
    Ok(true)
}

/// Points every use of `old` at `new` once their metadata agree; else removes `new`'s
/// node and fails (an internal error: the fused node must stand for what it replaces).
fn replace_checked(g: &mut Graph, old: Value, new: Value) -> Result<(), ExecError> {
    if g.meta(new)? != g.meta(old)? {
        let message = format!(
            "the fused node's output became {}, the replaced value's is {}",
            g.meta(new)?,
            g.meta(old)?
        );
        g.remove_node(new.node)?;
        return Err(ExecError::Transform {
            op: MATMUL_EPILOGUE.name,
            message,
        });
    }
    g.replace_all_uses(old, new)?;
    Ok(())
}

fn transform_error(message: String) -> ExecError {
    ExecError::Transform {
        op: MATMUL_EPILOGUE.name,
        message,
    }
}

fn gone(id: NodeId) -> ExecError {
    transform_error(format!("node %{} disappeared", id.index()))
}

/// Folds splits, then head splits or residual adds, into the epilogue nodes of `g`
/// (see the module doc). Returns whether anything changed.
pub(super) fn fold_epilogues(
    g: &mut Graph,
    movable: &dyn Fn(NodeId) -> bool,
) -> Result<bool, ExecError> {
    let mut changed = false;
    let epilogues: Vec<NodeId> = g
        .topo_order()?
        .into_iter()
        .filter(|&id| whole_epilogue(g, id))
        .collect();
    for &id in &epilogues {
        changed |= fold_split(g, id, movable)?;
    }
    // The pieces of the splits are new nodes: look again.
    let epilogues: Vec<NodeId> = g
        .topo_order()?
        .into_iter()
        .filter(|&id| cpu_epilogue(g, id))
        .collect();
    for id in epilogues {
        // A node whose result goes to attention heads, or one whose result gets a
        // residual added (never both: the residual keeps the result's layout).
        changed |= fold_heads(g, id, movable)? || fold_residual(g, id, movable)?;
    }
    Ok(changed)
}

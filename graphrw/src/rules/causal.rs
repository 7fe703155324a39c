//! Causal masks to `is_causal`: a fused attention node whose mask is (or contains) the
//! causal triangle gets `is_causal = true` and keeps only the rest of the mask, so the
//! kernel skips the key blocks above the diagonal instead of reading a mask for them.
//!
//! Exporters spell the triangle many ways (`triu`/`tril` of `full`/`ones`, `arange`
//! comparisons, sliced `bias` buffers, `where(causal, 0, -inf)`, constant triangles),
//! but all of them depend on no graph input. So instead of one pattern per spelling,
//! [`mark_causal`] evaluates such input-independent mask parts with the reference
//! executor (they are small: `Sq x Skv`) and compares the values with the triangle.
//! Masks that mix the triangle with a padding mask are split structurally:
//!
//! - bool: `and(T, R)` (either order, nested) keeps `R`;
//! - additive: `where(B, 0, y)` with `B` a bool split as above and `y` a large
//!   negative scalar keeps `where(R, 0, y)`; `add(A, R)` with `A` the additive triangle
//!   keeps `R`; `min(A, R)` keeps `R` when `R` is provably `<= 0`.
//!
//! Only exact equivalences are used:
//! - the triangle is the top-left aligned one of `is_causal` (key `j` visible to query
//!   `i` iff `j <= i`, also when `Sq != Skv`); a bottom-right (KV-cache) triangle is
//!   left alone;
//! - an additive triangle that hides with a finite value (`finfo.min`) instead of
//!   `-inf` is converted only when nothing else remains of the mask: every row then
//!   keeps key 0 visible and the hidden scores underflow to exactly 0 either way. With a
//!   padding mask beside it, a row whose visible keys are all padded would be averaged
//!   over all keys by the finite form and over the visible keys by `is_causal`, so such
//!   masks are left unchanged.

use std::collections::{BTreeSet, HashMap};

use crate::exec::run_reference;
use crate::meta::DType;
use crate::ops::{builtin, AttrValue, Op};
use crate::{Graph, GraphError, NodeId, Tensor, Value};

/// Input-independent mask parts with more nodes than this are not evaluated.
const MAX_CONE: usize = 256;
/// Nor those with more elements than this.
const MAX_ELEMENTS: u64 = 1 << 24;

/// What [`mark_causal`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CausalReport {
    /// Attention nodes that became causal.
    pub converted: usize,
    /// Of those, how many kept a (non-causal) remainder of their mask.
    pub with_remainder: usize,
    /// Attention nodes with a mask that were left alone.
    pub unchanged: usize,
}

/// The non-causal rest of a mask once its causal triangle is taken out.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Rest {
    /// Nothing: the mask was exactly the triangle.
    Empty,
    /// This value (bool: `true` attends; float: added).
    Value(Value),
}

/// How an additive triangle hides a key.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Hide {
    /// With `-inf`: exact in any combination.
    NegInf,
    /// With a finite large negative: exact only alone (see the module docs).
    Finite,
}

/// Sets `is_causal` on every `scaled_dot_product_attention` node whose mask contains
/// the causal triangle (see the module docs), keeping only the rest of the mask, then
/// removes the mask nodes nothing uses any more.
///
/// ```
/// use graphrw::{rules, Builder, DType, TensorMeta};
///
/// let g = Builder::new();
/// let q = g.input("q", TensorMeta::new(DType::F32, [1usize, 2, 8, 4]));
/// let tri = g.tril(g.ones_with(&[8, 8], DType::Bool)?)?;
/// let out = q.scaled_dot_product_attention(q, q, Some(g.var(tri)))?;
/// g.output(&[out])?;
/// let mut graph = g.finish();
/// let report = rules::causal::mark_causal(&mut graph)?;
/// assert_eq!(report.converted, 1);
/// # Ok::<(), graphrw::GraphError>(())
/// ```
pub fn mark_causal(graph: &mut Graph) -> Result<CausalReport, GraphError> {
    let op = &builtin::SCALED_DOT_PRODUCT_ATTENTION;
    let causal_at = op.attr_index("is_causal");
    let dropout_at = op.attr_index("dropout_p");
    let (Some(causal_at), Some(dropout_at)) = (causal_at, dropout_at) else {
        return Ok(CausalReport::default());
    };
    let mut report = CausalReport::default();
    let nodes_before = graph.node_count();
    let mut cache: HashMap<(Value, usize, usize), Option<Rest>> = HashMap::new();
    let sites: Vec<NodeId> = graph.nodes_of(op).collect();
    for id in sites {
        let node = graph.try_node(id)?;
        let Some(&mask) = node.operands().get(3) else {
            continue;
        };
        let attrs = node.attr_values().to_vec();
        let operands = node.operands().to_vec();
        let already = attrs[causal_at] == AttrValue::Bool(true);
        let dropout = !matches!(attrs[dropout_at], AttrValue::Float(p) if p == 0.0);
        let lens = seq_lens(graph, &operands);
        let rest = match lens {
            Some((sq, skv)) if !already && !dropout => match cache.get(&(mask, sq, skv)) {
                Some(r) => *r,
                None => {
                    let r = split_float_or_bool(graph, mask, sq, skv)?;
                    cache.insert((mask, sq, skv), r);
                    r
                }
            },
            _ => None,
        };
        let Some(rest) = rest else {
            report.unchanged += 1;
            continue;
        };
        let mut new_operands = operands[..3].to_vec();
        if let Rest::Value(r) = rest {
            new_operands.push(r);
            report.with_remainder += 1;
        }
        let mut new_attrs = attrs;
        new_attrs[causal_at] = AttrValue::Bool(true);
        let name = graph.try_node(id)?.name().map(str::to_string);
        let new = graph.add_node(op, new_operands, new_attrs, name)?;
        graph.replace_all_uses(Value::new(id, 0), Value::new(new, 0))?;
        graph.remove_node(id)?;
        report.converted += 1;
    }
    // Drops the masks' replaced parts (and remainders built for masks that could not
    // be converted after all).
    if report.converted > 0 || graph.node_count() != nodes_before {
        graph.remove_dead();
    }
    Ok(report)
}

/// `(Sq, Skv)` of an attention node from its q and k, when known.
fn seq_lens(graph: &Graph, operands: &[Value]) -> Option<(usize, usize)> {
    let q = graph.meta(operands[0]).ok()?;
    let k = graph.meta(operands[1]).ok()?;
    let qd = q.shape.as_known()?;
    let kd = k.shape.as_known()?;
    let sq = *qd.iter().rev().nth(1)?;
    let skv = *kd.iter().rev().nth(1)?;
    (sq > 0 && skv > 0).then_some((sq as usize, skv as usize))
}

/// The rest of `mask` (bool or additive) without its causal triangle, if it has one.
fn split_float_or_bool(
    graph: &mut Graph,
    mask: Value,
    sq: usize,
    skv: usize,
) -> Result<Option<Rest>, GraphError> {
    if graph.meta(mask)?.dtype == DType::Bool {
        return split_bool(graph, mask, sq, skv);
    }
    Ok(match split_additive(graph, mask, sq, skv)? {
        Some((Rest::Empty, _)) => Some(Rest::Empty),
        Some((rest, Hide::NegInf)) => Some(rest),
        _ => None,
    })
}

/// A bool mask (`true` attends) without its triangle: `Empty` when it is the triangle,
/// the other operand of an `and` with it, recursively.
fn split_bool(
    graph: &mut Graph,
    mask: Value,
    sq: usize,
    skv: usize,
) -> Result<Option<Rest>, GraphError> {
    if let Some(t) = evaluate_static(graph, mask) {
        return Ok(is_bool_triangle(&t, sq, skv).then_some(Rest::Empty));
    }
    let node = graph.try_node(mask.node)?;
    if node.builtin() != Some(Op::And) {
        return Ok(None);
    }
    let [a, b] = node.operands()[..] else {
        return Ok(None);
    };
    for (x, other) in [(a, b), (b, a)] {
        match split_bool(graph, x, sq, skv)? {
            Some(Rest::Empty) => return Ok(Some(Rest::Value(other))),
            Some(Rest::Value(r)) => {
                let and = graph.add_op(&builtin::AND, &[r, other], &[])?;
                return Ok(Some(Rest::Value(Value::new(and, 0))));
            }
            None => {}
        }
    }
    Ok(None)
}

/// An additive mask without its triangle, and how the triangle hides keys.
fn split_additive(
    graph: &mut Graph,
    mask: Value,
    sq: usize,
    skv: usize,
) -> Result<Option<(Rest, Hide)>, GraphError> {
    let dtype = graph.meta(mask)?.dtype;
    if let Some(t) = evaluate_static(graph, mask) {
        return Ok(additive_triangle(&t, sq, skv, dtype).map(|h| (Rest::Empty, h)));
    }
    let node = graph.try_node(mask.node)?;
    let operands = node.operands().to_vec();
    let node_op = node.op();
    match (node_op.builtin, &operands[..]) {
        (Some(Op::Where), &[cond, x, y]) => {
            let hide = match (scalar(graph, x), scalar(graph, y)) {
                (Some(0.0), Some(h)) => hide_kind(h, dtype),
                _ => None,
            };
            let Some(hide) = hide else { return Ok(None) };
            if graph.meta(cond)?.dtype != DType::Bool {
                return Ok(None);
            }
            Ok(match split_bool(graph, cond, sq, skv)? {
                Some(Rest::Empty) => Some((Rest::Empty, hide)),
                Some(Rest::Value(r)) => {
                    let w = graph.add_op(&builtin::WHERE, &[r, x, y], &[])?;
                    Some((Rest::Value(Value::new(w, 0)), hide))
                }
                None => None,
            })
        }
        (Some(Op::Add), &[a, b]) | (Some(Op::Minimum), &[a, b]) => {
            let is_add = node_op.is(Op::Add);
            for (x, other) in [(a, b), (b, a)] {
                if graph.meta(x)?.dtype != dtype || graph.meta(other)?.dtype != dtype {
                    return Ok(None);
                }
                if !is_add && !nonpositive(graph, other) {
                    continue;
                }
                match split_additive(graph, x, sq, skv)? {
                    // Only -inf survives the addition of another finite term.
                    Some((Rest::Empty, Hide::NegInf)) => {
                        return Ok(Some((Rest::Value(other), Hide::NegInf)))
                    }
                    Some((Rest::Value(r), Hide::NegInf)) => {
                        let combined = graph.add_op(node_op, &[r, other], &[])?;
                        return Ok(Some((Rest::Value(Value::new(combined, 0)), Hide::NegInf)));
                    }
                    _ => {}
                }
            }
            Ok(None)
        }
        _ => Ok(None),
    }
}

/// The hiding value `h` of an additive mask: `-inf`, or a finite value at most half the
/// dtype's lowest (`finfo.min` and the like).
fn hide_kind(h: f64, dtype: DType) -> Option<Hide> {
    let lowest = match dtype {
        DType::F16 => -65504.0,
        DType::BF16 => -3.389_531_389_251_535_5e38,
        DType::F32 => f32::MIN as f64,
        DType::F64 => f64::MIN,
        _ => return None,
    };
    if h == f64::NEG_INFINITY {
        Some(Hide::NegInf)
    } else {
        (h.is_finite() && h <= 0.5 * lowest).then_some(Hide::Finite)
    }
}

/// The value of a scalar (one-element) constant.
fn scalar(graph: &Graph, v: Value) -> Option<f64> {
    let node = graph.node(v.node)?;
    if !node.op().is(Op::Constant) {
        return None;
    }
    let t = node.payload()?;
    t.scalar_f64()
}

/// True when every element of `v` is provably `<= 0`: a constant, or `where(_, a, b)`
/// of such.
fn nonpositive(graph: &Graph, v: Value) -> bool {
    let Some(node) = graph.node(v.node) else {
        return false;
    };
    match node.builtin() {
        Some(Op::Constant) => node
            .payload()
            .is_some_and(|t| t.to_f64_vec().iter().all(|&x| x <= 0.0)),
        Some(Op::Where) => node.operands()[1..].iter().all(|&x| nonpositive(graph, x)),
        _ => false,
    }
}

/// The nodes `v` depends on, if none is a graph input and there are few of them.
fn static_cone(graph: &Graph, v: Value) -> Option<BTreeSet<NodeId>> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![v.node];
    while let Some(n) = stack.pop() {
        if !seen.insert(n) {
            continue;
        }
        if seen.len() > MAX_CONE {
            return None;
        }
        let node = graph.node(n)?;
        if node.op().is(Op::Input) {
            return None;
        }
        stack.extend(node.operands().iter().map(|o| o.node));
    }
    Some(seen)
}

/// The nodes `root` depends on, each after its operands (a depth-first post-order of
/// the cone [`static_cone`] found, `size` nodes): ordering the cone, not the whole
/// graph, keeps each evaluation O(cone) however big the graph and however many masks
/// it evaluates. `None` on a cycle.
fn cone_order(graph: &Graph, root: NodeId, size: usize) -> Option<Vec<NodeId>> {
    // Per node: false while its operands are being ordered, true once it is placed.
    let mut placed: HashMap<NodeId, bool> = HashMap::with_capacity(size);
    let mut order = Vec::with_capacity(size);
    let mut stack = vec![(root, false)];
    while let Some((n, operands_done)) = stack.pop() {
        if operands_done {
            placed.insert(n, true);
            order.push(n);
            continue;
        }
        match placed.get(&n) {
            Some(true) => continue,
            // Met again while its own operands are still being ordered: a cycle.
            Some(false) => return None,
            None => {}
        }
        placed.insert(n, false);
        stack.push((n, true));
        for o in graph.node(n)?.operands() {
            if !placed.get(&o.node).copied().unwrap_or(false) {
                stack.push((o.node, false));
            }
        }
    }
    Some(order)
}

/// The value of `v` when it depends on no graph input (evaluated on a copy of its
/// cone with the reference executor), else `None`; also `None` when a value of the
/// cone is past [`super::FOLD_MAX_TENSOR_BYTES`] or of unknown size.
fn evaluate_static(graph: &Graph, v: Value) -> Option<Tensor> {
    let meta = graph.meta(v).ok()?;
    if meta.shape.numel()? > MAX_ELEMENTS {
        return None;
    }
    let cone = static_cone(graph, v)?;
    // Every value computed on the way, not only the result, must fit the budget
    // (`range(0, 2^33)` sliced to 4 is small; its range is not).
    for &n in &cone {
        for m in graph.node(n)?.outputs() {
            let bytes = m
                .shape
                .numel()?
                .checked_mul(m.dtype.size_in_bytes() as u64)?;
            if bytes > super::FOLD_MAX_TENSOR_BYTES {
                return None;
            }
        }
    }
    let order = cone_order(graph, v.node, cone.len())?;
    let mut sub = Graph::new();
    let mut map: HashMap<NodeId, NodeId> = HashMap::new();
    for n in order {
        let node = graph.node(n)?;
        let new = if node.op().is(Op::Constant) {
            sub.add_constant(node.payload()?.clone()).node
        } else {
            let operands = node
                .operands()
                .iter()
                .map(|o| Some(Value::new(*map.get(&o.node)?, o.output)))
                .collect::<Option<Vec<_>>>()?;
            sub.add_node(node.op(), operands, node.attr_values().to_vec(), None)
                .ok()?
        };
        map.insert(n, new);
    }
    sub.set_outputs(vec![Value::new(*map.get(&v.node)?, v.output)])
        .ok()?;
    run_reference(&sub, &[]).ok()?.into_iter().next()
}

/// Calls `f(i, j, x)` for every element of `t` viewed at `[.., sq, skv]` (through
/// broadcast); false when `t`'s shape does not broadcast there or `f` says no.
fn all_entries(t: &Tensor, sq: usize, skv: usize, f: impl Fn(usize, usize, f64) -> bool) -> bool {
    let shape = t.shape();
    let r = shape.len();
    let (tq, tk) = match r {
        0 => (1, 1),
        1 => (1, shape[0]),
        _ => (shape[r - 2], shape[r - 1]),
    };
    if (tq != 1 && tq != sq) || (tk != 1 && tk != skv) {
        return false;
    }
    let vals = t.to_f64_vec();
    let plane = tq * tk;
    if plane == 0 {
        return false;
    }
    vals.chunks_exact(plane).all(|p| {
        (0..sq).all(|i| {
            (0..skv).all(|j| {
                let x = p[(if tq == 1 { 0 } else { i }) * tk + if tk == 1 { 0 } else { j }];
                f(i, j, x)
            })
        })
    })
}

/// True when `t` (bool) is the top-left causal triangle at `[sq, skv]`.
fn is_bool_triangle(t: &Tensor, sq: usize, skv: usize) -> bool {
    t.dtype() == DType::Bool && all_entries(t, sq, skv, |i, j, x| (x != 0.0) == (j <= i))
}

/// How `t` hides keys if it is the additive top-left causal triangle at `[sq, skv]`:
/// 0 on and below the diagonal, one hiding value (see [`hide_kind`]) above it.
fn additive_triangle(t: &Tensor, sq: usize, skv: usize, dtype: DType) -> Option<Hide> {
    if t.dtype() != dtype || skv < 2 || sq < 1 {
        return None;
    }
    // The hiding value: the entry above the diagonal of row 0.
    let h = {
        let shape = t.shape();
        let tk = shape.last().copied().unwrap_or(1);
        if tk != skv {
            return None;
        }
        t.to_f64_vec().get(1).copied()?
    };
    let hide = hide_kind(h, dtype)?;
    let same = |x: f64| x == h || (x.is_nan() && h.is_nan());
    all_entries(
        t,
        sq,
        skv,
        |i, j, x| if j <= i { x == 0.0 } else { same(x) },
    )
    .then_some(hide)
}

#[cfg(test)]
mod tests {
    use crate::selfcheck::{check_pass, Config};

    /// `mark_causal` keeps the numbers of every spelling it converts (the differential
    /// test rules get from `rule_set!`, for this pass).
    #[test]
    fn verify_mark_causal() {
        let report = check_pass(
            "mark_causal",
            concat!(file!(), ":", line!()),
            crate::rules::generators::causal_attention,
            |g| {
                super::mark_causal(g)
                    .map(|r| r.converted)
                    .map_err(|e| e.to_string())
            },
            &Config::from_env(),
        )
        .unwrap_or_else(|f| panic!("{f}"));
        println!("{report}");
        assert!(report.graphs >= 1);
    }
}

//! The schedule of a plan: where each value lives during a run, worked out once when
//! the plan is made (the interpreter then runs it with no hashing).

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use crate::graph::{Graph, NodeId, Value};

use super::bind::{needs_binding, BoundCache};
use super::executor::view;
use super::ExecError;

/// Where each value lives during a run, worked out once per plan: every value that is
/// read gets a slot of a dense array, and each step lists its operands' slots, its
/// outputs' slots (`None`: never read, freed at once) and the slots whose last reader
/// it is. A run then does no hashing.
#[derive(Debug, Default)]
pub(crate) struct Schedule {
    pub(super) steps: Vec<StepSlots>,
    /// The slot of each graph output (`None`: no node computes it).
    pub(super) outputs: Vec<Option<usize>>,
    pub(super) slots: usize,
    /// How many steps read symbols bound at run time.
    pub(super) symbolic_steps: usize,
    /// The bound views of the last run's symbolic steps, reused by a run whose inputs
    /// bind the same values.
    pub(super) bound: Mutex<Option<Arc<BoundCache>>>,
    /// Set once a run bound a symbol from a kernel's result (a data-dependent size):
    /// then bound views depend on data, not only on the inputs' shapes, and are never
    /// reused.
    pub(super) data_dependent: AtomicBool,
}

#[derive(Debug, Default)]
pub(super) struct StepSlots {
    /// The slot of each operand (`None`: produced by no earlier step).
    pub(super) operands: Vec<Option<usize>>,
    pub(super) outputs: Vec<Option<usize>>,
    /// Slots read for the last time by this step (each once).
    pub(super) frees: Vec<usize>,
    /// For graph inputs: the index of the caller's tensor.
    pub(super) input: Option<usize>,
    /// True when the node reads symbols bound at run time (its kernel is shown a bound
    /// copy of its attributes and metadata).
    pub(super) symbolic: bool,
}

/// The [`Schedule`] of `steps` over `g`.
pub(crate) fn schedule(
    g: &Graph,
    steps: &[(NodeId, Option<usize>)],
) -> Result<Schedule, ExecError> {
    // Last step that reads each value; graph outputs are read at the end.
    let mut last_use: HashMap<Value, usize> = HashMap::new();
    for (step, &(id, _)) in steps.iter().enumerate() {
        for &v in g.try_node(id)?.operands() {
            last_use.insert(v, step);
        }
    }
    for &v in g.outputs() {
        last_use.insert(v, usize::MAX);
    }
    let input_index: HashMap<NodeId, usize> = g
        .inputs()
        .iter()
        .enumerate()
        .map(|(i, &n)| (n, i))
        .collect();
    let mut slot: HashMap<Value, usize> = HashMap::new();
    let mut out = Schedule::default();
    for (step, &(id, _)) in steps.iter().enumerate() {
        let node = g.try_node(id)?;
        let operands = node
            .operands()
            .iter()
            .map(|v| slot.get(v).copied())
            .collect();
        let mut frees = Vec::new();
        for v in node.operands() {
            if last_use.get(v) == Some(&step) {
                if let Some(&s) = slot.get(v) {
                    if !frees.contains(&s) {
                        frees.push(s);
                    }
                }
            }
        }
        let outputs = (0..node.outputs().len())
            .map(|i| {
                let v = Value::new(id, i as u32);
                last_use.contains_key(&v).then(|| {
                    slot.insert(v, out.slots);
                    out.slots += 1;
                    out.slots - 1
                })
            })
            .collect();
        let symbolic = match view(g, id) {
            Ok(v) => needs_binding(&v),
            Err(_) => false,
        };
        out.symbolic_steps += usize::from(symbolic);
        out.steps.push(StepSlots {
            operands,
            outputs,
            frees,
            input: input_index.get(&id).copied(),
            symbolic,
        });
    }
    out.outputs = g.outputs().iter().map(|v| slot.get(v).copied()).collect();
    Ok(out)
}

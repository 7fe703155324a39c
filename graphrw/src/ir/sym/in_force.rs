//! The bounds in force: the one place the algebra's decisions read lower bounds from.
//!
//! Every operation that decides something of symbolic dims (which member of a `min` or
//! `max` wins, whether `(b*s) // s` is `b`, how two dims compare) reads the bounds in
//! force ([`current`]) and decides only what follows from them for every binding that
//! meets them. A graph opens a scope with its own [`Bounds`]
//! ([`Graph::bounds`](crate::graph::Graph::bounds)) around each node's inference, and
//! the ONNX importer around each node it folds, so inference, shape folding, the
//! verifier and the rewrites all decide alike. Outside a scope no bound is in force:
//! symbols are only `>= 0`.
//!
//! Inference may also find that the model itself proves a bound ([`prove`]): a reshape
//! whose `-1` stands beside `s*h` fails at run time unless `s*h >= 1`, and shape
//! arithmetic that divides by `s` fails where `s` is 0. What a scope proves is handed
//! back to whoever opened it ([`with`]), and a graph keeps it with its other bounds (a
//! run that breaks it would have failed in the model anyway; it now fails before the
//! first node, in one line naming the symbol).

use std::cell::RefCell;

use super::bounds::Bounds;

/// One scope: the bounds given, and those proven inside it.
struct Frame {
    given: Bounds,
    proven: Bounds,
}

thread_local! {
    static FRAMES: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
}

/// Pops the frame [`with`] pushed, also when `f` panics.
struct Pop;

impl Drop for Pop {
    fn drop(&mut self) {
        FRAMES.with(|s| s.borrow_mut().pop());
    }
}

/// Runs `f` with `bounds` in force (and nothing of an enclosing scope); returns its
/// result and the bounds proven inside (see [`prove`]).
pub fn with<R>(bounds: &Bounds, f: impl FnOnce() -> R) -> (R, Bounds) {
    FRAMES.with(|s| {
        s.borrow_mut().push(Frame {
            given: bounds.clone(),
            proven: Bounds::new(),
        })
    });
    let pop = Pop;
    let r = f();
    let proven = FRAMES.with(|s| {
        s.borrow_mut()
            .last_mut()
            .map(|fr| std::mem::take(&mut fr.proven))
            .unwrap_or_default()
    });
    drop(pop);
    (r, proven)
}

/// The bounds in force: the innermost scope's, with what was proven in it so far
/// (none outside a scope).
pub fn current() -> Bounds {
    FRAMES.with(|s| {
        s.borrow()
            .last()
            .map(|fr| fr.given.merge(&fr.proven))
            .unwrap_or_default()
    })
}

/// Records that every run of the model meets `bounds` (a use the model would fail
/// without: see the module docs); in force at once in the innermost scope, and handed
/// back by [`with`]. Outside a scope nothing is recorded.
pub fn prove(bounds: &Bounds) {
    if bounds.is_empty() {
        return;
    }
    FRAMES.with(|s| {
        if let Some(fr) = s.borrow_mut().last_mut() {
            fr.proven = fr.proven.merge(bounds);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_gives_its_bounds_and_hands_back_what_it_proved() {
        assert!(current().is_empty(), "nothing outside a scope");
        prove(&Bounds::new().at_least("x", 1));
        assert!(current().is_empty(), "nothing recorded outside a scope");
        let given = Bounds::new().at_least("s", 1);
        let ((outer, inner), proven) = with(&given, || {
            prove(&Bounds::new().at_least("h", 2));
            let outer = current();
            let (inner, p) = with(&Bounds::new(), current);
            assert!(p.is_empty());
            (outer, inner)
        });
        assert_eq!((outer.lower("s"), outer.lower("h")), (1, 2));
        assert!(inner.is_empty(), "an inner scope sees only its own bounds");
        assert_eq!(proven, Bounds::new().at_least("h", 2));
        assert!(current().is_empty(), "the scope is closed");
    }
}

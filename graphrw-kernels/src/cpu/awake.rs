//! Workers kept awake through a run: the other threads of the pool poll for work between
//! parallel kernels instead of sleeping.
//!
//! A run of a plan is a chain of kernels, most of them parallel, with short serial
//! stretches between them. A rayon worker that finds no work sleeps after a few dozen
//! rounds of yielding, and the next parallel kernel wakes it again. On a virtual machine
//! that wake goes through the hypervisor; once the vCPU has been idle for a while (a
//! server waiting for its next request) each wake costs tens to hundreds of
//! microseconds. On a 2-vCPU Intel Xeon KVM guest (family 6 model 167), BERT-base at
//! 1 × 128 took 21 ms run back to back and 39-45 ms with 0.1-0.3 s between runs, slower
//! than on one thread (34-38 ms), while onnxruntime (whose threads spin) went from 16 to
//! 22-24 ms.
//!
//! [`KeepAwake`] spawns one *poller* per other worker of the current pool when a run
//! starts. A poller executes whatever work the pool has ([`rayon::yield_now`]) and
//! spins while there is none, until the run ends, or until it has found nothing for
//! [`IDLE_LIMIT`] (then it returns so that its thread, which may be waiting inside a
//! `join` of its own, goes on; [`KeepAwake::top_up`] spawns a new one at the next
//! kernel). Off by [`KernelOptions::keep_workers_awake`](crate::KernelOptions).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a poller spins without finding work before it returns.
pub const IDLE_LIMIT: Duration = Duration::from_millis(2);

/// Polls between two reads of the clock.
const POLLS_PER_CLOCK: u32 = 64;

#[derive(Debug, Default)]
struct Shared {
    /// Set when the run ends: every poller returns.
    done: AtomicBool,
    /// Pollers spawned and not yet returned.
    alive: AtomicUsize,
}

/// The other workers of the current rayon pool kept polling for work while this lives
/// (see the [module docs](self)). Made on a worker thread of the pool the run's kernels
/// use; elsewhere, or on a pool of one thread, it does nothing.
#[derive(Debug)]
pub struct KeepAwake {
    shared: Arc<Shared>,
    /// The worker the run walks its plan on (a poller there returns at once: it would
    /// spin above the run's own frames).
    owner: Option<usize>,
    /// Pollers wanted: the pool's other workers.
    wanted: usize,
}

impl KeepAwake {
    /// Starts pollers on the current pool's other workers (none when `on` is false, off
    /// a pool, or on a pool of one thread).
    pub fn start(on: bool) -> KeepAwake {
        let owner = rayon::current_thread_index();
        let wanted = match (on, owner) {
            (true, Some(_)) => rayon::current_num_threads().saturating_sub(1),
            _ => 0,
        };
        let keep = KeepAwake {
            shared: Arc::new(Shared::default()),
            owner,
            wanted,
        };
        keep.top_up();
        keep
    }

    /// Spawns pollers until as many are alive as the pool has other workers (one atomic
    /// load when they all are): called between kernels.
    pub fn top_up(&self) {
        while self.shared.alive.load(Ordering::Acquire) < self.wanted {
            self.shared.alive.fetch_add(1, Ordering::AcqRel);
            let shared = Arc::clone(&self.shared);
            let owner = self.owner;
            rayon::spawn(move || poll(&shared, owner));
        }
    }
}

impl Drop for KeepAwake {
    fn drop(&mut self) {
        self.shared.done.store(true, Ordering::Release);
    }
}

/// A poller's loop: work from the pool when there is some, spinning when there is none,
/// until the run ends or [`IDLE_LIMIT`] passes without work.
fn poll(shared: &Shared, owner: Option<usize>) {
    if rayon::current_thread_index() != owner {
        let mut idle_since = Instant::now();
        let mut polls = 0u32;
        while !shared.done.load(Ordering::Acquire) {
            match rayon::yield_now() {
                Some(rayon::Yield::Executed) => {
                    idle_since = Instant::now();
                    polls = 0;
                }
                Some(rayon::Yield::Idle) => {
                    std::hint::spin_loop();
                    polls += 1;
                    if polls.is_multiple_of(POLLS_PER_CLOCK) && idle_since.elapsed() > IDLE_LIMIT {
                        break;
                    }
                }
                None => break,
            }
        }
    }
    shared.alive.fetch_sub(1, Ordering::AcqRel);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;

    #[test]
    fn a_run_with_pollers_computes_what_it_computes_without() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let sums: Vec<u64> = pool.install(|| {
            let keep = KeepAwake::start(true);
            assert_eq!(keep.wanted, 2);
            (0..50u64)
                .map(|i| {
                    keep.top_up();
                    (0..10_000u64).into_par_iter().map(|x| x * i).sum::<u64>()
                })
                .collect()
        });
        let expected: Vec<u64> = (0..50u64).map(|i| i * 10_000 * 9_999 / 2).collect();
        assert_eq!(sums, expected);
    }

    #[test]
    fn pollers_return_when_the_run_ends() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let shared = pool.install(|| {
            let keep = KeepAwake::start(true);
            let shared = Arc::clone(&keep.shared);
            (0..1000u32).into_par_iter().for_each(|_| ());
            drop(keep);
            shared
        });
        let start = Instant::now();
        while shared.alive.load(Ordering::Acquire) > 0 {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "a poller never returned"
            );
            std::thread::yield_now();
        }
    }

    #[test]
    fn off_a_pool_or_switched_off_it_starts_nothing() {
        assert_eq!(
            std::thread::spawn(|| KeepAwake::start(true).wanted)
                .join()
                .unwrap(),
            0
        );
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        assert_eq!(pool.install(|| KeepAwake::start(false).wanted), 0);
    }
}

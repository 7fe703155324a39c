//! Hostile ONNX bytes must not cost memory out of proportion to their size before they
//! are refused. A counting allocator measures the peak of live heap bytes while
//! loading (one test in this binary, so nothing else allocates meanwhile).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to `System` unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                let now = LIVE.fetch_add(new_size - layout.size(), Ordering::Relaxed)
                    + (new_size - layout.size());
                PEAK.fetch_max(now, Ordering::Relaxed);
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Loads `bytes` and returns the error and the peak heap bytes the load added.
fn load_peak(case: &str, bytes: &[u8]) -> (String, usize) {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let r = graphrw::onnx::load_bytes(bytes);
    let peak = PEAK.load(Ordering::Relaxed) - base;
    match r {
        Ok(_) => panic!("{case}: loaded, expected an error"),
        Err(e) => (e.to_string(), peak),
    }
}

#[test]
fn tiny_fields_in_bulk_cost_no_more_than_their_bytes() {
    const LEN: usize = 16 << 20;
    let cases: [(&str, Vec<u8>); 2] = [
        // Field number 0, varint 0: not protobuf at all.
        ("zero bytes", vec![0u8; LEN]),
        // `ir_version` set again and again: valid protobuf, but no graph.
        ("repeated ir_version", [8u8, 8].repeat(LEN / 2)),
    ];
    for (case, bytes) in cases {
        let (msg, peak) = load_peak(case, &bytes);
        assert_eq!(msg.lines().count(), 1, "{case}: {msg}");
        // Before the fix the top-level field list alone took 12 to 24 times the input.
        assert!(
            peak <= 2 * LEN,
            "{case}: loading {LEN} bytes peaked at {peak} heap bytes ({msg})"
        );
    }
}

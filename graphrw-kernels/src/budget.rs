//! The run budget: the largest tensor a kernel may allocate.
//!
//! Kernels that make a tensor whose size comes from attributes or values rather than
//! from their inputs' storage (`full`, `arange`, `expand`, and the executors around
//! them) check the size here before they allocate, so that a model asking for
//! `Range(0, 2^33)` is an error that names the kernel, never an aborted process.
//!
//! The budget is, in order: the value given to [`set_max_tensor_bytes`], the
//! [`KernelOptions::max_tensor_bytes`] installed on the calling thread (a plan's
//! options, while it runs), or the machine's total memory (`MemTotal` of
//! `/proc/meminfo`; [`FALLBACK_MAX_TENSOR_BYTES`] where that cannot be read).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::{DType, KernelError, KernelOptions};

/// The run budget where neither a setting nor the machine's memory is known (16 GiB).
pub const FALLBACK_MAX_TENSOR_BYTES: u64 = 16 << 30;

/// The budget set by [`set_max_tensor_bytes`] (0: not set).
static SET: AtomicU64 = AtomicU64::new(0);

/// Sets the run budget to `bytes` for the whole process, over any options' (0 goes back
/// to the options' or the default).
pub fn set_max_tensor_bytes(bytes: u64) {
    SET.store(bytes, Ordering::Relaxed);
}

/// The largest tensor, in bytes, a kernel may allocate (see the module docs).
pub fn max_tensor_bytes() -> u64 {
    match SET.load(Ordering::Relaxed) {
        0 => KernelOptions::current().tensor_budget(),
        n => n,
    }
}

/// The budget where nothing sets one: the machine's total memory (read once), else
/// [`FALLBACK_MAX_TENSOR_BYTES`].
pub fn default_max_tensor_bytes() -> u64 {
    static DEFAULT: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *DEFAULT.get_or_init(|| total_memory().unwrap_or(FALLBACK_MAX_TENSOR_BYTES))
}

impl KernelOptions {
    /// The tensor budget in bytes: [`max_tensor_bytes`](Self::max_tensor_bytes), else
    /// the machine's memory ([`default_max_tensor_bytes`]).
    pub fn tensor_budget(&self) -> u64 {
        self.max_tensor_bytes
            .unwrap_or_else(default_max_tensor_bytes)
    }
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn total_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The element count of `shape` when a tensor of it and `dtype` fits the run budget;
/// an error naming `op` when the count overflows or the bytes exceed the budget.
pub fn check_alloc(op: &'static str, shape: &[usize], dtype: DType) -> Result<usize, KernelError> {
    check_alloc_within(op, shape, dtype, max_tensor_bytes())
}

/// [`check_alloc`] against an explicit budget of `max_bytes`.
pub fn check_alloc_within(
    op: &'static str,
    shape: &[usize],
    dtype: DType,
    max_bytes: u64,
) -> Result<usize, KernelError> {
    let too_large = || {
        KernelError::invalid(
            op,
            format!(
                "{dtype}{} is past the budget of {} (max_tensor_bytes)",
                short_shape(shape),
                human_bytes(max_bytes)
            ),
        )
    };
    let numel = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(too_large)?;
    let bytes = (numel as u64).checked_mul(dtype.size_in_bytes() as u64);
    match bytes {
        Some(b) if b <= max_bytes => Ok(numel),
        _ => Err(too_large()),
    }
}

/// `bytes` in bytes below 1 MiB, else in MiB or GiB with one decimal.
fn human_bytes(bytes: u64) -> String {
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    match bytes {
        b if b >= GIB => format!("{:.1} GiB", b as f64 / GIB as f64),
        b if b >= MIB => format!("{:.1} MiB", b as f64 / MIB as f64),
        b => format!("{b} bytes"),
    }
}

/// `shape` as `[a, b, ..]`, its middle elided past eight dims.
fn short_shape(shape: &[usize]) -> String {
    if shape.len() <= 8 {
        return format!("{shape:?}");
    }
    let head: Vec<String> = shape[..4].iter().map(usize::to_string).collect();
    let tail: Vec<String> = shape[shape.len() - 2..]
        .iter()
        .map(usize::to_string)
        .collect();
    format!(
        "[{}, ..({} dims).., {}]",
        head.join(", "),
        shape.len(),
        tail.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_past_the_budget_or_overflowing_are_refused() {
        assert_eq!(check_alloc_within("full", &[4, 4], DType::F32, 64), Ok(16));
        let e = check_alloc_within("full", &[4, 5], DType::F32, 64).unwrap_err();
        assert!(e.to_string().contains("budget of 64 bytes"), "{e}");
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
        let e = check_alloc_within("full", &[usize::MAX, 3], DType::I64, u64::MAX).unwrap_err();
        assert!(e.to_string().starts_with("full: "), "{e}");
        assert!(max_tensor_bytes() > 0);
        let _g = KernelOptions::default().with_max_tensor_bytes(64).install();
        assert_eq!(max_tensor_bytes(), 64);
        assert!(check_alloc("full", &[4, 5], DType::F32).is_err());
    }
}

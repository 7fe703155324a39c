//! The process's CPU time, read by the timing examples' `--cpu-time`.

/// CPU seconds run so far by every thread of this process
/// (`clock_gettime(CLOCK_PROCESS_CPUTIME_ID)`: exact to the nanosecond, unlike
/// `/proc/self/task/*/schedstat`, whose figure for a running thread lags by up to a
/// scheduler tick, 4 ms here).
#[cfg(target_os = "linux")]
pub fn process_cpu_seconds() -> Result<f64, String> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Err(format!(
            "--cpu-time: clock_gettime failed: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9)
}

/// CPU time is read on Linux only.
#[cfg(not(target_os = "linux"))]
pub fn process_cpu_seconds() -> Result<f64, String> {
    Err("--cpu-time: only on Linux".into())
}

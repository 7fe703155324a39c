//! What the CLI's test binaries share: scratch folders and the peak memory that
//! `/usr/bin/time -f PEAK_KIB=%M` prints.

use std::path::PathBuf;

/// A fresh, empty scratch folder for `tag` (per process).
pub fn tmp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("graphrw-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// Peak resident memory of a command, in KiB, from the `PEAK_KIB=` line that
/// `/usr/bin/time -f PEAK_KIB=%M` writes (None without it).
pub fn peak_kib(stderr: &str) -> Option<u64> {
    stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("PEAK_KIB=")?.trim().parse().ok())
}

//! Hostile model files cost memory in proportion to their size before they are refused:
//! a file of bulk tiny protobuf fields (zero bytes, or one field repeated) is refused
//! with one line by `graphrw inspect`, and its peak resident memory, measured with
//! `/usr/bin/time` (a visible skip without it), stays near the file's size. No timings
//! are asserted.

use std::path::PathBuf;
use std::process::Command;

/// Bytes of each hostile file.
const LEN: usize = 16 << 20;

fn tmp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("graphrw-hostile-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// Peak resident memory in KiB from `/usr/bin/time -f PEAK_KIB=%M`.
fn peak_kib(stderr: &str) -> Option<u64> {
    stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("PEAK_KIB=")?.trim().parse().ok())
}

#[test]
fn bulk_tiny_fields_are_refused_near_the_files_size() {
    let dir = tmp_dir("fields");
    let bin = env!("CARGO_BIN_EXE_graphrw");
    let timed = std::path::Path::new("/usr/bin/time").exists();
    let cases: [(&str, Vec<u8>); 2] = [
        // Field number 0, varint 0: not protobuf at all.
        ("zeros.onnx", vec![0u8; LEN]),
        // `ir_version` set again and again: valid protobuf, but no graph.
        ("ir_versions.onnx", [8u8, 8].repeat(LEN / 2)),
    ];
    for (name, bytes) in cases {
        let path = dir.join(name);
        std::fs::write(&path, bytes).expect("write");
        let mut cmd = if timed {
            let mut c = Command::new("/usr/bin/time");
            c.args(["-f", "PEAK_KIB=%M", bin]);
            c
        } else {
            Command::new(bin)
        };
        let out = cmd.arg("inspect").arg(&path).output().expect("run graphrw");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name} loaded:\n{stderr}");
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| !l.starts_with("PEAK_KIB=") && !l.starts_with("Command exited"))
            .collect();
        assert_eq!(lines.len(), 1, "{name}: {stderr}");
        assert!(lines[0].starts_with("error:"), "{name}: {stderr}");
        match peak_kib(&stderr) {
            // The file is read once; a list of its fields cost 12 to 24 times its size.
            Some(kib) => assert!(
                kib * 1024 < (LEN as u64) * 4,
                "{name}: {LEN} bytes peaked at {kib} KiB"
            ),
            None => println!("SKIPPED peak memory check: /usr/bin/time not available"),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

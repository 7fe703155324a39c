//! Hostile model files cost memory in proportion to their size before they are refused:
//! a file of bulk tiny protobuf fields (zero bytes, or one field repeated) is refused
//! with one line by `graphrw inspect`, and its peak resident memory, measured with
//! `/usr/bin/time` (a visible skip without it), stays near the file's size; a model
//! path that is a stream loads from a pipe, and an endless device (`/dev/zero`) is
//! refused at its first bytes. No timings are asserted.

use std::process::Command;

mod support;
use support::{peak_kib, tmp_dir};

/// Bytes of each hostile file.
const LEN: usize = 16 << 20;

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

/// A model path that cannot be mapped is read as a stream: a model piped in loads,
/// and an endless device is refused at its first bytes instead of read without end.
#[test]
#[cfg(unix)]
fn streams_load_and_endless_devices_are_refused() {
    use std::io::Write;
    use std::process::Stdio;
    let bin = env!("CARGO_BIN_EXE_graphrw");
    let out = Command::new(bin)
        .args(["inspect", "/dev/zero"])
        .output()
        .expect("run graphrw");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("not an ONNX model"), "{stderr}");

    // A small model (one Relu) through a pipe.
    let b = graphrw::Builder::new();
    let x = b.input(
        "x",
        graphrw::TensorMeta::new(graphrw::DType::F32, [2usize, 3]),
    );
    b.output(&[x.relu().expect("relu")]).expect("output");
    let dir = tmp_dir("stream");
    let path = dir.join("relu.onnx");
    graphrw::onnx::save(&b.finish(), &path).expect("save");
    let bytes = std::fs::read(&path).expect("read");
    let mut child = Command::new(bin)
        .args(["inspect", "/dev/stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run graphrw");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&bytes)
        .expect("write the model");
    let out = child.wait_with_output().expect("graphrw ends");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("relu"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

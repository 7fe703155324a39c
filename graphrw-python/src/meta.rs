//! The model's metadata as onnxruntime's `get_modelmeta()` shows it, read straight from
//! the `ModelProto`'s top-level fields (and the graph's name and doc string) without
//! decoding the graph: every other field, nodes and weights included, is skipped over
//! (seeked past in a file), so a model of gigabytes costs a few reads.

use std::io::{self, BufRead, BufReader, Cursor, Seek};
use std::path::Path;

/// What `InferenceSession.get_modelmeta()` returns (onnxruntime's `ModelMetadata`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ModelMeta {
    /// `ModelProto.producer_name`.
    pub producer_name: String,
    /// `ModelProto.producer_version`.
    pub producer_version: String,
    /// `ModelProto.domain`.
    pub domain: String,
    /// `ModelProto.doc_string` (onnxruntime's `description`).
    pub description: String,
    /// `ModelProto.model_version`, `None` where the field is absent.
    pub version: Option<i64>,
    /// `GraphProto.name`.
    pub graph_name: String,
    /// `GraphProto.doc_string` (onnxruntime's `graph_description`).
    pub graph_description: String,
    /// `ModelProto.metadata_props`, in file order (a later key wins, as in onnxruntime).
    pub custom: Vec<(String, String)>,
}

/// The longest string field read (a doc string or metadata value); longer ones are an
/// error rather than an allocation of whatever size a corrupt length asks for.
const MAX_STRING: u64 = 64 << 20;

/// The metadata of the model file at `path`.
pub fn from_file(path: &Path) -> io::Result<ModelMeta> {
    let file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    read(BufReader::new(file), len)
}

/// The metadata of a serialised `ModelProto`.
pub fn from_bytes(bytes: &[u8]) -> io::Result<ModelMeta> {
    read(Cursor::new(bytes), bytes.len() as u64)
}

fn bad(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// A protobuf reader over `r` that knows its position, to skip fields by seeking.
struct Scanner<R> {
    r: R,
    pos: u64,
}

impl<R: BufRead + Seek> Scanner<R> {
    fn byte(&mut self) -> io::Result<u8> {
        let mut b = [0u8; 1];
        self.r.read_exact(&mut b)?;
        self.pos += 1;
        Ok(b[0])
    }

    fn varint(&mut self) -> io::Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(bad("a varint longer than 10 bytes"))
    }

    fn skip(&mut self, n: u64, end: u64) -> io::Result<()> {
        if n > end.saturating_sub(self.pos) {
            return Err(bad("a field runs past the end of its message"));
        }
        let n = i64::try_from(n).map_err(|_| bad("a field longer than 2^63 bytes"))?;
        self.r.seek_relative(n)?;
        self.pos += n as u64;
        Ok(())
    }

    fn string(&mut self, n: u64, end: u64) -> io::Result<String> {
        if n > end.saturating_sub(self.pos) || n > MAX_STRING {
            return Err(bad("a string field runs past the end of its message"));
        }
        let mut buf = vec![0u8; n as usize];
        self.r.read_exact(&mut buf)?;
        self.pos += n;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    /// Reads the fields up to `end`, calling `field(scanner, number, len_or_value, end)`
    /// for each: for a length-delimited field the callback consumes its bytes or returns
    /// `false` to have them skipped; other wire types are skipped or handed over as
    /// values (varints).
    fn fields(
        &mut self,
        end: u64,
        mut field: impl FnMut(&mut Self, u32, Wire) -> io::Result<bool>,
    ) -> io::Result<()> {
        while self.pos < end {
            let key = self.varint()?;
            let number = u32::try_from(key >> 3).map_err(|_| bad("a field number past 2^32"))?;
            match key & 7 {
                0 => {
                    let v = self.varint()?;
                    field(self, number, Wire::Varint(v))?;
                }
                1 => self.skip(8, end)?,
                5 => self.skip(4, end)?,
                2 => {
                    let len = self.varint()?;
                    if len > end.saturating_sub(self.pos) {
                        return Err(bad("a field runs past the end of its message"));
                    }
                    let stop = self.pos + len;
                    if !field(self, number, Wire::Bytes(len, stop))? {
                        self.skip(len, stop)?;
                    } else if self.pos != stop {
                        return Err(bad("a nested message does not end where its length says"));
                    }
                }
                w => return Err(bad(format!("wire type {w} (groups are not ONNX)"))),
            }
        }
        if self.pos != end {
            return Err(bad("the last field runs past the end of its message"));
        }
        Ok(())
    }
}

/// A field's value as the scanner hands it over.
enum Wire {
    Varint(u64),
    /// Length and the position where the field ends.
    Bytes(u64, u64),
}

fn read<R: BufRead + Seek>(r: R, len: u64) -> io::Result<ModelMeta> {
    let mut s = Scanner { r, pos: 0 };
    let mut m = ModelMeta::default();
    s.fields(len, |s, number, wire| {
        Ok(match (number, wire) {
            (2, Wire::Bytes(n, end)) => {
                m.producer_name = s.string(n, end)?;
                true
            }
            (3, Wire::Bytes(n, end)) => {
                m.producer_version = s.string(n, end)?;
                true
            }
            (4, Wire::Bytes(n, end)) => {
                m.domain = s.string(n, end)?;
                true
            }
            (5, Wire::Varint(v)) => {
                m.version = Some(v as i64);
                true
            }
            (6, Wire::Bytes(n, end)) => {
                m.description = s.string(n, end)?;
                true
            }
            (7, Wire::Bytes(_, end)) => {
                s.fields(end, |s, number, wire| {
                    Ok(match (number, wire) {
                        (2, Wire::Bytes(n, end)) => {
                            m.graph_name = s.string(n, end)?;
                            true
                        }
                        (10, Wire::Bytes(n, end)) => {
                            m.graph_description = s.string(n, end)?;
                            true
                        }
                        _ => false,
                    })
                })?;
                true
            }
            (14, Wire::Bytes(_, end)) => {
                let (mut key, mut value) = (String::new(), String::new());
                s.fields(end, |s, number, wire| {
                    Ok(match (number, wire) {
                        (1, Wire::Bytes(n, end)) => {
                            key = s.string(n, end)?;
                            true
                        }
                        (2, Wire::Bytes(n, end)) => {
                            value = s.string(n, end)?;
                            true
                        }
                        _ => false,
                    })
                })?;
                m.custom.push((key, value));
                true
            }
            _ => false,
        })
    })?;
    Ok(m)
}

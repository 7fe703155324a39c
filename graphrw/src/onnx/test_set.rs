//! ONNX test data sets: the `test_data_set_N/` folders next to a model, each holding
//! `input_K.pb` and `output_K.pb` tensor files ([`read_test_set`], [`read_test_sets`]).

use std::path::{Path, PathBuf};

use super::{read_tensor_pb, OnnxError};
use crate::{Graph, Tensor};

/// One test data set: its inputs and expected outputs, in file order (`input_0.pb`,
/// `input_1.pb`, ...), each with the name its file records (empty when it records none).
#[derive(Clone, Debug)]
pub struct TestSet {
    /// The folder read.
    pub dir: PathBuf,
    /// `(name, tensor)` of each `input_K.pb`, by `K`.
    pub inputs: Vec<(String, Tensor)>,
    /// `(name, tensor)` of each `output_K.pb`, by `K`.
    pub outputs: Vec<(String, Tensor)>,
}

impl TestSet {
    /// The inputs in the order of `graph`'s inputs: by name when every file records
    /// one, else in file order. An error names the graph input without a tensor, or
    /// the count that does not fit.
    pub fn inputs_for(&self, graph: &Graph) -> Result<Vec<Tensor>, OnnxError> {
        let names: Vec<&str> = graph
            .inputs()
            .iter()
            .filter_map(|&id| graph.node(id).and_then(|n| n.name()))
            .collect();
        let by_name = !self.inputs.is_empty() && self.inputs.iter().all(|(n, _)| !n.is_empty());
        if by_name && names.len() == graph.inputs().len() {
            return names
                .iter()
                .map(|want| {
                    self.inputs
                        .iter()
                        .find(|(n, _)| n == want)
                        .map(|(_, t)| t.clone())
                        .ok_or_else(|| {
                            OnnxError::Model(format!(
                                "{}: no input file holds graph input `{want}` (the files hold {})",
                                self.dir.display(),
                                self.input_names()
                            ))
                        })
                })
                .collect();
        }
        if self.inputs.len() != graph.inputs().len() {
            return Err(OnnxError::Model(format!(
                "{}: {} input files for {} graph inputs",
                self.dir.display(),
                self.inputs.len(),
                graph.inputs().len()
            )));
        }
        Ok(self.inputs.iter().map(|(_, t)| t.clone()).collect())
    }

    fn input_names(&self) -> String {
        let names: Vec<String> = self.inputs.iter().map(|(n, _)| format!("`{n}`")).collect();
        names.join(", ")
    }
}

/// Reads one test data set folder (`.../test_data_set_0`): every `input_K.pb` and
/// `output_K.pb`, sorted by `K`. A folder with no input file is an error.
pub fn read_test_set(dir: impl AsRef<Path>) -> Result<TestSet, OnnxError> {
    let dir = dir.as_ref();
    let read = |prefix: &str| -> Result<Vec<(String, Tensor)>, OnnxError> {
        numbered(dir, prefix)?.iter().map(read_tensor_pb).collect()
    };
    let inputs = read("input_")?;
    if inputs.is_empty() {
        return Err(OnnxError::Model(format!(
            "{}: no input_K.pb file (is this a test_data_set_N folder?)",
            dir.display()
        )));
    }
    Ok(TestSet {
        dir: dir.to_path_buf(),
        inputs,
        outputs: read("output_")?,
    })
}

/// Reads every `test_data_set_N` folder of a model's folder, sorted by `N`.
pub fn read_test_sets(model_dir: impl AsRef<Path>) -> Result<Vec<TestSet>, OnnxError> {
    let model_dir = model_dir.as_ref();
    numbered_dirs(model_dir)?
        .iter()
        .map(read_test_set)
        .collect()
}

/// The files `PREFIX<K>.pb` of `dir`, sorted by `K`.
fn numbered(dir: &Path, prefix: &str) -> Result<Vec<PathBuf>, OnnxError> {
    let mut files: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .map_err(|e| OnnxError::io(dir, e))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let k = name
                .strip_prefix(prefix)?
                .strip_suffix(".pb")?
                .parse()
                .ok()?;
            Some((k, e.path()))
        })
        .collect();
    files.sort();
    Ok(files.into_iter().map(|(_, p)| p).collect())
}

/// The `test_data_set_<N>` folders of `dir`, sorted by `N`.
fn numbered_dirs(dir: &Path) -> Result<Vec<PathBuf>, OnnxError> {
    let mut sets: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .map_err(|e| OnnxError::io(dir, e))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let n = name.strip_prefix("test_data_set_")?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    sets.sort();
    Ok(sets.into_iter().map(|(_, p)| p).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::write_tensor_pb;
    use crate::{Builder, DType, TensorMeta};

    /// A scratch folder unique to this test and process.
    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("graphrw-test-set-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("test_data_set_0")).unwrap();
        dir
    }

    #[test]
    fn reads_named_inputs_and_orders_them_as_the_graph() {
        let dir = scratch("named");
        let set = dir.join("test_data_set_0");
        let a = Tensor::from_vec(vec![2], vec![1f32, 2.0]).unwrap();
        let b = Tensor::from_vec(vec![1], vec![5f32]).unwrap();
        // Files in the other order than the graph's inputs.
        write_tensor_pb(set.join("input_0.pb"), "b", &b).unwrap();
        write_tensor_pb(set.join("input_1.pb"), "a", &a).unwrap();
        write_tensor_pb(set.join("output_0.pb"), "y", &a).unwrap();
        let sets = read_test_sets(&dir).unwrap();
        assert_eq!(sets.len(), 1);
        let t = &sets[0];
        assert_eq!(t.inputs[0].0, "b");
        assert_eq!(t.inputs[1].0, "a");
        assert_eq!(t.outputs[0].0, "y");
        let g = Builder::new();
        let x = g.input("a", TensorMeta::new(DType::F32, [2usize]));
        let y = g.input("b", TensorMeta::new(DType::F32, [1usize]));
        g.output(&[x.add(y).unwrap()]).unwrap();
        let graph = g.finish();
        let ordered = t.inputs_for(&graph).unwrap();
        assert_eq!(ordered[0].to_f64_vec(), vec![1.0, 2.0]);
        assert_eq!(ordered[1].to_f64_vec(), vec![5.0]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_folder_without_inputs_is_an_error_naming_it() {
        let dir = scratch("empty");
        let e = read_test_set(dir.join("test_data_set_0"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("test_data_set_0") && e.contains("input_K.pb"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

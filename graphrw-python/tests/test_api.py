"""The API on small hand-made models: dtypes round-trip, bad inputs raise the right
exception, ``python -m graphrw`` mirrors the command, the GIL is released."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import graphrw
from conftest import CORPUS, corpus_models, skip_without_corpus

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

ONNX_TYPES = {
    "float32": TensorProto.FLOAT,
    "float64": TensorProto.DOUBLE,
    "float16": TensorProto.FLOAT16,
    "bfloat16": TensorProto.BFLOAT16,
    "int64": TensorProto.INT64,
    "int32": TensorProto.INT32,
    "bool": TensorProto.BOOL,
}


def identity_model(dtype: str, shape=("n", 3), op: str = "Identity") -> bytes:
    """``y = op(x)`` over one input of `dtype`."""
    x = helper.make_tensor_value_info("x", ONNX_TYPES[dtype], list(shape))
    y = helper.make_tensor_value_info("y", ONNX_TYPES[dtype], list(shape))
    node = helper.make_node(op, ["x"], ["y"])
    graph = helper.make_graph([node], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    return model.SerializeToString()


def sample(dtype: str) -> np.ndarray:
    if dtype == "bool":
        return np.array([[True, False, True], [False, False, True]])
    if dtype == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        return np.array([[1.5, -2.0, 3.25], [0.0, 1e3, -7.0]], dtype=ml_dtypes.bfloat16)
    return np.array([[1.5, -2.0, 3.25], [0.0, 1e3, -7.0]]).astype(dtype)


@pytest.mark.parametrize("dtype", list(ONNX_TYPES))
def test_dtypes_round_trip(dtype: str) -> None:
    sess = graphrw.InferenceSession(identity_model(dtype))
    (arg,) = sess.get_inputs()
    assert arg.name == "x" and arg.shape == ["n", 3]
    assert arg.type == f"tensor({ {'float32': 'float', 'float64': 'double'}.get(dtype, dtype)})"
    x = sample(dtype)
    (y,) = sess.run(None, {"x": x})
    assert y.dtype == x.dtype and y.shape == x.shape
    assert np.array_equal(y.astype(np.float64), x.astype(np.float64))
    assert y.flags.writeable
    # A Fortran-ordered array goes in as its values.
    (z,) = sess.run(["y"], {"x": np.asfortranarray(x)})
    assert np.array_equal(z.astype(np.float64), x.astype(np.float64))


def test_bf16_takes_float32_and_lists() -> None:
    sess = graphrw.InferenceSession(identity_model("bfloat16"))
    x = np.array([[1.0, 2.5, -3.0]], dtype=np.float32)
    (y,) = sess.run(None, {"x": x})
    assert y.dtype.name == "bfloat16"
    assert np.array_equal(y.astype(np.float32), x)
    sess = graphrw.InferenceSession(identity_model("int64"))
    (y,) = sess.run(None, {"x": [[1, 2, 3]]})
    assert y.dtype == np.int64 and y.tolist() == [[1, 2, 3]]


def test_compute_on_the_fast_path() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    graph = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    a = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    for optimize in (True, False):
        (got,) = graphrw.InferenceSession(model, optimize=optimize).run(None, {"x": a})
        want = np.exp(a) / np.exp(a).sum(-1, keepdims=True)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_runs_reuse_buffers_and_keep_earlier_results() -> None:
    """Each run's outputs are arrays over buffers handed to the caller (128 KiB here,
    large enough for the session's pool, which never draws them again): every run is
    exact and an array returned before stays as it was."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 128])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 128])
    graph = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    sess = graphrw.InferenceSession(model)
    rng = np.random.default_rng(1)
    kept = []
    for n in (256, 256, 200, 256):
        a = rng.standard_normal((n, 128)).astype(np.float32)
        (got,) = sess.run(None, {"x": a})
        want = np.exp(a - a.max(-1, keepdims=True))
        want /= want.sum(-1, keepdims=True)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
        kept.append((got, got.copy()))
    for got, copy in kept:
        assert np.array_equal(got, copy)


def test_bad_models_raise_load_error(tmp_path: Path) -> None:
    with pytest.raises(graphrw.LoadError, match="no_such.onnx"):
        graphrw.optimize(tmp_path / "no_such.onnx")
    with pytest.raises(graphrw.LoadError, match="not a valid ONNX protobuf"):
        graphrw.InferenceSession(b"\xff\xff not a model")
    with pytest.raises(graphrw.LoadError):
        graphrw.explain(b"\x08", "x")
    # Every error is a GraphrwError with a one-line message.
    with pytest.raises(graphrw.GraphrwError) as e:
        graphrw.optimize(b"garbage")
    assert "\n" not in str(e.value)


def test_bad_arguments_raise_invalid_argument() -> None:
    model = identity_model("float32")
    with pytest.raises(graphrw.InvalidArgument, match="expected a path, bytes or an onnx.ModelProto"):
        graphrw.optimize(42)
    with pytest.raises(graphrw.InvalidArgument, match="unknown rule set `nope`"):
        graphrw.optimize(model, rules="nope")
    with pytest.raises(ValueError):  # InvalidArgument is a ValueError too
        graphrw.optimize(model, rules=["attention", "nope"])
    with pytest.raises(graphrw.InvalidArgument, match="unknown rule `nope`"):
        graphrw.explain(model, "nope")
    sess = graphrw.InferenceSession(model)
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(graphrw.InvalidArgument, match="missing input"):
        sess.run(None, {})
    with pytest.raises(graphrw.InvalidArgument, match="unknown input name"):
        sess.run(None, {"x": x, "z": x})
    with pytest.raises(graphrw.InvalidArgument, match="unknown output name"):
        sess.run(["nope"], {"x": x})
    with pytest.raises(graphrw.InvalidArgument, match="input x: expected f32"):
        sess.run(None, {"x": np.zeros((2, 3), np.int64)})  # wrong dtype
    with pytest.raises(graphrw.InvalidArgument, match="input x: expected f32"):
        sess.run(None, {"x": np.zeros((2, 4), np.float32)})  # wrong shape
    with pytest.raises(graphrw.InvalidArgument, match="unsupported dtype"):
        sess.run(None, {"x": np.zeros((2, 3), np.complex64)})


def test_optimize_rules_and_layouts(tmp_path: Path) -> None:
    skip_without_corpus()
    model = corpus_models()[0] / "model.onnx"
    only = graphrw.optimize(model, rules="attention")
    whole = graphrw.optimize(model)
    assert only.rewrites > 0 and whole.rewrites >= only.rewrites
    assert isinstance(whole.model, bytes)
    single = graphrw.optimize(model, tmp_path / "one.onnx", external_data=False)
    assert not (tmp_path / "one.onnx.data").exists() and single.saved
    graphrw.optimize(model, tmp_path / "ext.onnx", external_data=True)
    assert (tmp_path / "ext.onnx.data").exists()
    assert repr(whole) == str(whole)


def test_gil_is_released() -> None:
    skip_without_corpus()
    model = corpus_models()[0] / "model.onnx"
    errors = []

    def work() -> None:
        try:
            graphrw.optimize(model)
        except Exception as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "graphrw", *args], capture_output=True, text=True, timeout=300
    )


def test_python_m_graphrw(tmp_path: Path) -> None:
    skip_without_corpus()
    model_dir = corpus_models()[0]
    r = _cli("inspect", str(model_dir / "model.onnx"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("model: ") and "ops:" in r.stdout
    out = tmp_path / "o.onnx"
    r = _cli("optimize", str(model_dir / "model.onnx"), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert out.exists() and "nodes:" in r.stdout
    r = _cli("run", str(model_dir), "--model", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "all outputs within tolerance" in r.stdout
    r = _cli("explain", str(model_dir / "model.onnx"), "--rule", "nope")
    assert r.returncode == 1
    assert r.stderr.startswith("error: unknown rule `nope`") and r.stderr.count("\n") == 1
    r = _cli("inspect", str(tmp_path / "missing.onnx"))
    assert r.returncode == 1 and r.stderr.startswith("error: ")


def test_optimize_logs_each_stage(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    skip_without_corpus()
    model = corpus_models()[0] / "model.onnx"
    with caplog.at_level(logging.INFO, logger="graphrw"):
        graphrw.optimize(str(model), str(tmp_path / "o.onnx"))
    msgs = [r.getMessage() for r in caplog.records if r.name == "graphrw"]
    assert msgs[0] == f"optimize: loading {model}", msgs
    assert msgs[1].startswith("optimize: loaded in "), msgs
    passes = ["attention", "causal masks", "norm spellings", "kernels", "unweighted rms norms"]
    assert [m.split(":")[1].strip() for m in msgs[2:7]] == [f"pass {p}" for p in passes], msgs
    assert msgs[7].startswith("optimize: saved in "), msgs


def test_every_subcommand_and_version() -> None:
    r = _cli("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"graphrw {graphrw.__version__}"
    r = _cli("--help")
    assert r.returncode == 0, r.stderr
    for sub in ["ops", "inspect", "print", "dot", "explain", "optimize", "run"]:
        assert f"\n  {sub} " in r.stdout, f"{sub} missing from:\n{r.stdout}"
    r = _cli("ops", "softmax")
    assert r.returncode == 0 and "softmax" in r.stdout, r.stderr
    r = _cli("frobnicate")
    assert r.returncode == 2 and "frobnicate" in r.stderr


def test_the_console_script_is_installed() -> None:
    # The wheel's `graphrw` command, beside the interpreter that has the package.
    script = Path(sys.executable).parent / "graphrw"
    if not script.exists():
        pytest.skip(f"no console script at {script} (package not installed as a wheel)")
    r = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == f"graphrw {graphrw.__version__}", r.stderr


def test_the_extension_is_abi3() -> None:
    assert graphrw._native.__file__.endswith(".abi3.so")
    assert graphrw.__version__


def test_corpus_location_is_reported() -> None:
    # Not a check of graphrw: says where the corpus tests looked.
    print(f"corpus: {CORPUS} ({len(corpus_models())} models)")


def test_explain_a_whole_model_returns_every_site() -> None:
    skip_without_corpus()
    model = CORPUS / "llama_sdpa" / "model.onnx"
    report = graphrw.explain(model)
    assert isinstance(report, graphrw.Coverage)
    assert len(report) > 0 and len(report) == len(report.sites)
    assert report.fused + sum(report.not_fused_by_reason.values()) == len(report)
    assert report.fused_by_rule.get("attention") == 2, report
    for site in report.sites:
        assert isinstance(site, graphrw.Site)
        assert site.fused == (site.reason is None)
        if site.nearest is not None:
            assert isinstance(site.nearest, graphrw.NearMiss)
            assert site.nearest.check in site.reason
    assert f"{len(report)} site(s): {report.fused} fused" in str(report)
    # The `graphrw` command prints the same report, and a hint naming itself.
    r = _cli("explain", str(model))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(str(report)), r.stdout
    assert "cargo" not in r.stdout


def test_rules_lists_every_rule_explain_takes() -> None:
    listed = graphrw.rules()
    names = [r.name for r in listed]
    assert "attention" in names and len(names) == len(set(names))
    assert {r.pass_ for r in listed} >= {"canonical", "attention", "kernels"}
    swiglu = [r for r in listed if r.rule_set == "swiglu"]
    assert swiglu and all(r.pass_ == "kernels" for r in swiglu)
    skip_without_corpus()
    model = CORPUS / "llama_sdpa" / "model.onnx"
    # A kernel's rule is explained on the graph its pass sees, not the raw import.
    text = graphrw.explain(model, swiglu[0].name)
    assert text.startswith(f"rule `{swiglu[0].name}`:")
    assert "as the `kernels` pass sees it" in text and "graphrw print " in text
    assert "cargo" not in text
    with pytest.raises(graphrw.InvalidArgument, match="--list-rules"):
        graphrw.explain(model, "nope")
    with pytest.raises(graphrw.InvalidArgument, match="give the rule"):
        graphrw.explain(model, node="t1")


def test_assume_bounds_a_symbol_for_every_run() -> None:
    model = identity_model("float32", shape=("n", 3), op="Relu")
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.0
    sess = graphrw.InferenceSession(model, assume="n>=2")
    assert sess.warmup_error is None  # warmed up at n = 2, not 1
    (y,) = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    with pytest.raises(graphrw.GraphrwError, match="n >= 2"):
        sess.run(None, {"x": x[:1]})
    # Saved with the model by optimize, and in force when the file is loaded again.
    saved = graphrw.optimize(model, assume=["n>=2"]).model
    with pytest.raises(graphrw.GraphrwError, match="n >= 2"):
        graphrw.InferenceSession(saved).run(None, {"x": x[:1]})
    (y,) = graphrw.InferenceSession(saved).run(None, {"x": x})
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    for bad in ("n>=x", "n", ["n>=1", 3]):
        with pytest.raises(graphrw.InvalidArgument, match="assume"):
            graphrw.InferenceSession(model, assume=bad)

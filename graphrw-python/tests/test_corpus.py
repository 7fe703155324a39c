"""Every corpus model through ``graphrw.optimize`` and ``graphrw.InferenceSession``
against its test data, and through onnxruntime on the written model."""

from __future__ import annotations

from pathlib import Path

import pytest

import graphrw
from conftest import assert_close, corpus_models, load_test_data, skip_without_corpus

MODELS = corpus_models()
IDS = [m.name for m in MODELS]


def test_corpus_present() -> None:
    skip_without_corpus()
    assert MODELS


@pytest.mark.parametrize("model_dir", MODELS, ids=IDS)
def test_optimize_and_run(model_dir: Path, tmp_path: Path) -> None:
    inputs, expected = load_test_data(model_dir)
    out = tmp_path / "fused.onnx"
    report = graphrw.optimize(model_dir / "model.onnx", out)
    assert out.is_file()
    assert report.model is None and report.output == str(out)
    assert report.nodes_after < report.nodes_before, str(report)
    assert report.rewrites > 0
    assert "graphrw.optimize: nodes" in str(report)

    # The fast path on the original model, and on the optimised one.
    for path in (model_dir / "model.onnx", out):
        sess = graphrw.InferenceSession(path)
        names = [i.name for i in sess.get_inputs()]
        assert len(names) == len(inputs)
        got = sess.run(None, dict(zip(names, inputs)))
        assert len(got) >= len(expected)
        for k, (g, w) in enumerate(zip(got, expected)):
            assert_close(g, w, f"{model_dir.name} {path.name} output {k}")
        # Outputs by name, in the order asked for.
        outs = [o.name for o in sess.get_outputs()]
        again = sess.run(list(reversed(outs)), dict(zip(names, inputs)))
        assert_close(again[-1], got[0], "by name")

    # onnxruntime runs the written model.
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    got = sess.run(None, dict(zip(names, inputs)))
    for k, (g, w) in enumerate(zip(got, expected)):
        assert_close(g, w, f"{model_dir.name} onnxruntime output {k}")


@pytest.mark.parametrize("model_dir", MODELS[:2], ids=IDS[:2])
def test_proto_and_bytes_give_the_same_model(model_dir: Path) -> None:
    onnx = pytest.importorskip("onnx")
    proto = onnx.load(str(model_dir / "model.onnx"))  # external data read in
    from_proto = graphrw.optimize(proto)
    from_bytes = graphrw.optimize(proto.SerializeToString())
    from_path = graphrw.optimize(model_dir / "model.onnx")
    assert isinstance(from_proto.model, onnx.ModelProto)
    assert isinstance(from_bytes.model, bytes)
    assert isinstance(from_path.model, bytes)
    # The same model (compared as messages: protobuf's re-encoding of a parsed model
    # need not be byte-identical to graphrw's encoding).
    parsed = onnx.ModelProto()
    parsed.ParseFromString(from_bytes.model)
    assert from_proto.model == parsed
    assert from_bytes.model == from_path.model
    assert from_bytes.rule_counts == from_proto.rule_counts == from_path.rule_counts
    assert from_bytes.nodes_after == from_path.nodes_after
    # The returned model runs, in either form.
    inputs, expected = load_test_data(model_dir)
    for m in (from_proto.model, from_bytes.model):
        sess = graphrw.InferenceSession(m)
        got = sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), inputs)})
        assert_close(got[0], expected[0], f"{model_dir.name} from memory")


def test_explain_mirrors_the_cli() -> None:
    skip_without_corpus()
    model = MODELS[0] / "model.onnx"
    # The first built-in rule, whatever its name: the unknown-rule error lists them.
    with pytest.raises(graphrw.InvalidArgument) as e:
        graphrw.explain(model, "no_such_rule")
    msg = str(e.value)
    assert msg.startswith("unknown rule `no_such_rule` (built-in rules: ")
    first = msg.split("built-in rules: ")[1].split(",")[0].rstrip(")")
    text = graphrw.explain(model, first)
    assert text.startswith(f"rule `{first}`:")
    assert "match(es)" in text
    with pytest.raises(graphrw.InvalidArgument, match="no node printed as or named"):
        graphrw.explain(model, first, node="no_such_node")

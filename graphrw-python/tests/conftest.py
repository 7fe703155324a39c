"""Shared fixtures: the corpus beside the repository (``../shared/corpus``, or
``$GRAPHRW_CORPUS``), its models' test data, and the tolerance ``graphrw run`` uses."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
CORPUS = Path(os.environ.get("GRAPHRW_CORPUS", REPO.parent / "shared" / "corpus"))


def corpus_models() -> List[Path]:
    """The corpus's model folders (holding ``model.onnx``), sorted; empty without one."""
    if not CORPUS.is_dir():
        return []
    return sorted(p.parent for p in CORPUS.glob("*/model.onnx"))


def skip_without_corpus() -> None:
    if not corpus_models():
        pytest.skip(f"SKIPPED: no corpus at {CORPUS} (../shared is missing)")


def load_test_data(model_dir: Path) -> Tuple[List[np.ndarray], List[np.ndarray]]:
    """``test_data_set_0``'s inputs and expected outputs, in order."""
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper

    def read(prefix: str) -> List[np.ndarray]:
        files = sorted(
            (model_dir / "test_data_set_0").glob(f"{prefix}_*.pb"),
            key=lambda p: int(p.stem.split("_")[-1]),
        )
        out = []
        for f in files:
            t = onnx.TensorProto()
            t.ParseFromString(f.read_bytes())
            out.append(numpy_helper.to_array(t))
        return out

    return read("input"), read("output")


def feeds(names: List[str], inputs: List[np.ndarray]) -> Dict[str, np.ndarray]:
    return dict(zip(names, inputs))


def assert_close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Within ``graphrw run``'s tolerance: 1e-4 absolute plus 1e-3 relative (f16/bf16:
    a few ulps of their type)."""
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    atol, rtol = {"float16": (2e-3, 1e-2), "bfloat16": (1.6e-2, 8e-2)}.get(
        want.dtype.name, (1e-4, 1e-3)
    )
    g = got.astype(np.float64)
    w = want.astype(np.float64)
    np.testing.assert_allclose(g, w, atol=atol, rtol=rtol, err_msg=what)

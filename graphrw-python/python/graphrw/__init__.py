"""graphrw: rewrite, optimise and run ONNX computation graphs.

Three calls cover most uses::

    import graphrw
    report = graphrw.optimize("model.onnx", "fused.onnx")   # attention fusion, fused kernels
    print(report)                                           # what fired, nodes before/after
    sess = graphrw.InferenceSession("fused.onnx")           # onnxruntime's API
    outputs = sess.run(None, {"input_ids": ids})

A model is a path (``str`` or ``os.PathLike``; external data is read from its folder),
the ``bytes`` of a serialised ONNX model, or an ``onnx.ModelProto`` (``onnx`` is
optional: anything with ``SerializeToString`` is taken as one). Errors are
:class:`GraphrwError` subclasses carrying the same one-line messages as the
``graphrw`` command. The work runs in Rust with the GIL released.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Union

from . import _native
from ._errors import (
    GraphrwError,
    InvalidArgument,
    LoadError,
    OptimizeError,
    RunError,
    SaveError,
)
from ._session import (
    DecodeLoop,
    ExecutionMode,
    GraphOptimizationLevel,
    InferenceSession,
    IOBinding,
    ModelMetadata,
    NodeArg,
    OrtValue,
    RunOptions,
    SessionOptions,
    get_all_providers,
    get_available_providers,
    get_device,
)

__version__: str = _native.__version__

__all__ = [
    "optimize",
    "explain",
    "Report",
    "Skip",
    "InferenceSession",
    "DecodeLoop",
    "SessionOptions",
    "RunOptions",
    "GraphOptimizationLevel",
    "ExecutionMode",
    "IOBinding",
    "OrtValue",
    "NodeArg",
    "ModelMetadata",
    "get_available_providers",
    "get_all_providers",
    "get_device",
    "GraphrwError",
    "LoadError",
    "OptimizeError",
    "SaveError",
    "RunError",
    "InvalidArgument",
    "__version__",
]

#: What a model argument may be.
ModelLike = Union[str, "os.PathLike[str]", bytes, Any]


def _source(model: Any) -> "tuple[Union[str, bytes], str]":
    """The model as the native module takes it (a path or bytes) and its form:
    ``"path"``, ``"bytes"`` or ``"proto"``."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model), "bytes"
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model), "path"
    serialize = getattr(model, "SerializeToString", None)
    if callable(serialize):
        return serialize(), "proto"
    raise InvalidArgument(
        f"model: expected a path, bytes or an onnx.ModelProto, got {type(model).__name__}"
    )


class Skip(NamedTuple):
    """A match whose replacement failed and was rolled back."""

    rule: str
    """The rule."""
    at: str
    """The anchor node (``%id op "name"``)."""
    reason: str
    """Why the replacement failed."""

    def __str__(self) -> str:
        return f"rule `{self.rule}` at {self.at}: {self.reason}"


class Report:
    """What :func:`optimize` did.

    Attributes:
        rule_counts: rewrites per rule (``{"sdpa_...": 12, ...}``).
        fused_nodes: nodes per fused op in the result (``scaled_dot_product_attention``
            and every ``fused.*`` op).
        skipped: the matches whose replacement failed and was rolled back, with why.
        nodes_before, nodes_after: the graph's node count before and after.
        causal_masks: attention nodes whose mask became ``is_causal``.
        seconds: time spent loading, optimising and writing.
        text: the report as ``graphrw optimize`` prints it.
        saved: the writer's summary when ``output`` was given, else ``None``.
        output: the path written, or ``None``.
        model: the optimised model when no ``output`` was given, in the form the input
            had: ``bytes`` for bytes, an ``onnx.ModelProto`` (the input's own class) for
            a ModelProto, and ``bytes`` for a path. ``None`` when written to ``output``.
    """

    def __init__(self, fields: Mapping[str, Any], model: Any, output: Optional[str]):
        self.rule_counts: Dict[str, int] = dict(fields["rule_counts"])
        self.fused_nodes: Dict[str, int] = dict(fields["fused_nodes"])
        self.skipped: List[Skip] = [Skip(*s) for s in fields["skipped"]]
        self.nodes_before: int = fields["nodes_before"]
        self.nodes_after: int = fields["nodes_after"]
        self.causal_masks: int = fields["causal_masks"]
        self.seconds: float = fields["seconds"]
        self.text: str = fields["text"]
        self.saved: Optional[str] = fields["saved"]
        self.output: Optional[str] = output
        self.model: Any = model

    @property
    def rewrites(self) -> int:
        """Rewrites in all."""
        return sum(self.rule_counts.values())

    def __str__(self) -> str:
        lines = [
            f"graphrw.optimize: nodes {self.nodes_before} -> {self.nodes_after}, "
            f"{self.rewrites} rewrites in {self.seconds * 1e3:.1f} ms"
        ]
        rows = [(rule, n) for rule, n in sorted(self.rule_counts.items())]
        rows += [(f"[{op}]", n) for op, n in sorted(self.fused_nodes.items())]
        if rows:
            width = max(len(r) for r, _ in rows)
            lines.append(f"  {'rule / [fused op nodes]':<{width}}  count")
            lines += [f"  {r:<{width}}  {n:>5}" for r, n in rows]
        if self.causal_masks:
            lines.append(f"  causal masks: {self.causal_masks}")
        lines += [f"  skipped: {s}" for s in self.skipped]
        if self.output is not None:
            lines.append(f"  written: {self.saved or self.output}")
        return "\n".join(lines)

    __repr__ = __str__


def optimize(
    model: ModelLike,
    output: Union[str, "os.PathLike[str]", None] = None,
    *,
    rules: Union[str, Sequence[str]] = "default",
    external_data: Optional[bool] = None,
) -> Report:
    """Optimises a model with graphrw's rule sets, as ``graphrw optimize`` does.

    Args:
        model: a path, the bytes of an ONNX model, or an ``onnx.ModelProto``.
        output: where to write the optimised model. Without it the model comes back in
            ``report.model``, in the form it was given (bytes for a path).
        rules: ``"default"`` (or ``"all"``: attention fusion, causal masks, then the
            generated fused kernels), or one rule set name or a list of them:
            ``"canonical"``, ``"attention"``, ``"kernels"`` or one kernel
            (``"rms_norm"``, ``"bias_gelu"``, ...), applied in one pass.
        external_data: the written weights' layout: ``None`` keeps the input's
            (weights from external data go to ``OUTPUT.data``), ``True`` writes every
            weight of 1 KiB or more to ``OUTPUT.data``, ``False`` writes one file.

    Returns:
        A :class:`Report`; ``print(report)`` shows a short table.

    Raises:
        LoadError, OptimizeError, SaveError, InvalidArgument (an unknown rule set).
    """
    src, form = _source(model)
    if isinstance(rules, str):
        names = [] if rules in ("default", "all") else [rules]
    else:
        names = list(rules)
        if not all(isinstance(n, str) for n in names):
            raise InvalidArgument("rules: expected a str or a list of str")
    layout = {None: "keep", True: "external", False: "single"}.get(external_data)
    if layout is None:
        raise InvalidArgument("external_data: expected None, True or False")
    out = os.fspath(output) if output is not None else None
    fields = _native.optimize(src, out, names, layout, None, out is None)
    result: Any = fields["model"]
    if result is not None and form == "proto":
        proto = type(model)()
        proto.ParseFromString(result)
        result = proto
    return Report(fields, result, out)


def explain(model: ModelLike, rule: str, node: Optional[str] = None) -> str:
    """Why a built-in rule matches or not, as ``graphrw explain`` prints it.

    With ``node`` (its printed name, ``t41``, or its ONNX name), says where matching
    stopped at that node and why; without it, lists the rule's near misses over the
    model, deepest first.

    Raises:
        LoadError, InvalidArgument (an unknown rule or node).
    """
    src, _ = _source(model)
    return _native.explain(src, rule, node)

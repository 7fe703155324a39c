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

import numpy as np

from . import _native
from ._errors import (
    GraphrwError,
    InvalidArgument,
    LoadError,
    OptimizeError,
    RunError,
    SaveError,
)

__version__: str = _native.__version__

__all__ = [
    "optimize",
    "explain",
    "Report",
    "Skip",
    "InferenceSession",
    "NodeArg",
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


class NodeArg:
    """A graph input or output, as onnxruntime's ``NodeArg``: ``name``, ``shape`` (ints
    and symbolic dims' names) and ``type`` (``"tensor(float)"``)."""

    __slots__ = ("name", "shape", "type", "dtype")

    def __init__(self, name: str, dtype: str, type: str, shape: List[Union[int, str]]):
        self.name = name
        self.type = type
        self.shape = shape
        #: The numpy dtype name (``"float32"``; ``"bfloat16"`` for bf16).
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


def _node_arg(info: "tuple[str, str, str, List[str]]") -> NodeArg:
    name, dtype, ort_type, dims = info
    shape: List[Union[int, str]] = [int(d) if d.isdigit() else d for d in dims]
    return NodeArg(name, dtype, ort_type, shape)


def _bf16() -> Any:
    """ml_dtypes' bfloat16, or None without ml_dtypes."""
    try:
        import ml_dtypes  # type: ignore[import-not-found]
    except ImportError:
        return None
    return ml_dtypes.bfloat16


_SUPPORTED = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "bool")


class InferenceSession:
    """Runs a model on graphrw's CPU fast path, with onnxruntime's API.

    The model is optimised by the default pipeline (attention fusion, causal masks,
    generated fused kernels) and planned on the default executor stack, as
    ``graphrw run`` does; a rewrite that fails leaves the model as loaded.

    Inputs and outputs are numpy arrays of float32, float64, float16, bfloat16
    (``ml_dtypes.bfloat16``), int64, int32 or bool. numpy has no bfloat16 of its own:
    a bf16 output comes back as ``ml_dtypes.bfloat16`` when ``ml_dtypes`` is
    installed (``onnx`` depends on it), else as float32 (exact: every bf16 is a
    float32); a bf16 input takes either, float32 rounded to bf16.

    Args:
        model: a path, the bytes of an ONNX model, or an ``onnx.ModelProto``.
        optimize: ``False`` runs the model as loaded on the reference kernels
            (``graphrw run --executors reference``).

    Raises:
        LoadError, RunError (the model cannot be planned).
    """

    def __init__(self, model: ModelLike, *, optimize: bool = True):
        src, _ = _source(model)
        self._session = _native.Session(src, optimize)
        self._inputs = [_node_arg(i) for i in self._session.inputs()]
        self._outputs = [_node_arg(o) for o in self._session.outputs()]

    def get_inputs(self) -> List[NodeArg]:
        """The graph inputs, in order."""
        return list(self._inputs)

    def get_outputs(self) -> List[NodeArg]:
        """The graph outputs, in order."""
        return list(self._outputs)

    @property
    def optimized(self) -> str:
        """What the optimiser did (``nodes: a -> b`` and the fused ops)."""
        return self._session.optimized()

    def _feed(self, arg: NodeArg, value: Any) -> "tuple[str, List[int], bytes]":
        if isinstance(value, np.ndarray):
            array = value
        else:
            want = _bf16() if arg.dtype == "bfloat16" else arg.dtype
            array = np.asarray(value, dtype=want if want is not None else np.float32)
        name = array.dtype.name
        if name not in _SUPPORTED:
            raise InvalidArgument(
                f"input `{arg.name}`: unsupported dtype {array.dtype} "
                f"(graphrw takes {', '.join(_SUPPORTED)})"
            )
        if array.dtype.byteorder == ">":
            array = array.astype(array.dtype.newbyteorder("<"))
        array = np.ascontiguousarray(array)
        return name, list(array.shape), array.tobytes()

    def run(
        self,
        output_names: Optional[Sequence[str]],
        input_feed: Mapping[str, Any],
        run_options: Any = None,
    ) -> List[np.ndarray]:
        """Runs the model, as onnxruntime's ``InferenceSession.run``.

        Args:
            output_names: the outputs to return, by name, or ``None`` for all.
            input_feed: every input by name, as a numpy array (or anything
                ``numpy.asarray`` takes, converted to the input's dtype).
            run_options: accepted for onnxruntime compatibility and ignored.

        Returns:
            The outputs as numpy arrays, in the order of ``output_names``.

        Raises:
            InvalidArgument (an unknown or missing name, an array of the wrong dtype or
            shape), RunError.
        """
        if not isinstance(input_feed, Mapping):
            raise InvalidArgument("input_feed: expected a dict of input name -> array")
        known = {a.name for a in self._inputs}
        unknown = [k for k in input_feed if k not in known]
        if unknown:
            raise InvalidArgument(
                f"unknown input name(s) {', '.join(map(repr, unknown))} "
                f"(the model's inputs: {', '.join(sorted(known))})"
            )
        missing = [a.name for a in self._inputs if a.name not in input_feed]
        if missing:
            raise InvalidArgument(f"missing input(s): {', '.join(missing)}")
        feeds = [self._feed(a, input_feed[a.name]) for a in self._inputs]
        if output_names is None:
            wanted = list(range(len(self._outputs)))
        else:
            if isinstance(output_names, str):
                raise InvalidArgument("output_names: expected a list of names or None")
            index = {o.name: k for k, o in enumerate(self._outputs)}
            bad = [n for n in output_names if n not in index]
            if bad:
                raise InvalidArgument(
                    f"unknown output name(s) {', '.join(map(repr, bad))} "
                    f"(the model's outputs: {', '.join(index)})"
                )
            wanted = [index[n] for n in output_names]
        raw = self._session.run(feeds)
        return [_array(*raw[k]) for k in wanted]


def _array(dtype: str, shape: List[int], data: bytearray) -> np.ndarray:
    """A writable numpy array over the bytes the native module made."""
    if dtype == "bfloat16":
        bf16 = _bf16()
        if bf16 is not None:
            return np.frombuffer(data, dtype=bf16).reshape(shape)
        # bf16 is the top half of a float32.
        halves = np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16
        return halves.view(np.float32).reshape(shape)
    return np.frombuffer(data, dtype=np.dtype(dtype).newbyteorder("<")).reshape(shape)

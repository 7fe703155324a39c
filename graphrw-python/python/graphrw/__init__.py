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
    "rules",
    "Coverage",
    "Site",
    "NearMiss",
    "RuleInfo",
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


def _assumed(assume: Union[str, Sequence[str], None]) -> List[str]:
    """The ``assume`` argument as a list of bound texts."""
    if assume is None:
        return []
    if isinstance(assume, str):
        return [assume]
    texts = list(assume)
    if not all(isinstance(t, str) for t in texts):
        raise InvalidArgument("assume: expected a str or a list of str, as \"seq>=1\"")
    return texts


def optimize(
    model: ModelLike,
    output: Union[str, "os.PathLike[str]", None] = None,
    *,
    rules: Union[str, Sequence[str]] = "default",
    external_data: Optional[bool] = None,
    assume: Union[str, Sequence[str], None] = None,
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
        assume: lower bounds on symbolic dims, ``"seq>=1"`` or a list of them
            (``graphrw --assume``): shape arithmetic folds further under them
            (``max(seq, 1)`` is ``seq``), and they are saved with the model and checked
            at every run.

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
    fields = _native.optimize(src, out, names, layout, None, out is None, _assumed(assume))
    result: Any = fields["model"]
    if result is not None and form == "proto":
        proto = type(model)()
        proto.ParseFromString(result)
        result = proto
    return Report(fields, result, out)


class NearMiss(NamedTuple):
    """The nearest fusing rule at a site that did not fuse, and where it stopped."""

    rule: str
    """The rule."""
    pass_: str
    """The pipeline pass it runs in; the names below are those of the graph it sees."""
    anchor: str
    """The node it was tried at, as the printer names it (``t61``)."""
    node: Optional[str]
    """The node where its pattern stopped (``None`` when it matched)."""
    position: str
    """The pattern position where it stopped (``operand 1 of `mul` ``)."""
    check: str
    """The failed check, without the graph's names (the same for every such miss)."""
    message: str
    """The failure sentence, naming the graph's nodes."""
    matched: bool
    """True when the rule matches but was not applied."""

    def __str__(self) -> str:
        return f"`{self.rule}` at {self.anchor} ({self.pass_} pass): {self.message}"


def _near_miss(n: Optional[Mapping[str, Any]]) -> Optional[NearMiss]:
    """A :class:`NearMiss` from the native module's fields."""
    if n is None:
        return None
    return NearMiss(
        n["rule"],
        n["pass"],
        n["anchor"],
        n["node"],
        n["position"],
        n["check"],
        n["message"],
        n["matched"],
    )


class Site(NamedTuple):
    """A node where a fusion could start, and what became of it."""

    node: str
    """The node as the printer names it in the graph of the pass that found it."""
    onnx_name: Optional[str]
    """Its ONNX node name, when the model gave one."""
    op: str
    """Its op (``softmax``, ``mean``, ``layer_norm``, ``erf``, ...)."""
    pass_: str
    """The pass whose graph it was found in (``attention``, ``kernels``)."""
    fused_by: Optional[str]
    """The rule that fused it."""
    rewritten_by: Optional[str]
    """A rule that does not fuse which replaced it first."""
    nearest: Optional[NearMiss]
    """For a site not fused: the nearest rule and why it did not match."""
    reason: Optional[str]
    """Why it did not fuse, without the graph's names; ``None`` when fused."""

    @property
    def fused(self) -> bool:
        """True when a fusing rule replaced it."""
        return self.fused_by is not None


class Coverage:
    """What :func:`explain` found on a whole model: every site, fused or not.

    Attributes:
        sites: every :class:`Site`, in the order found.
        text: the report as ``graphrw explain MODEL`` prints it.
    """

    def __init__(self, fields: Mapping[str, Any]):
        self.sites: List[Site] = [
            Site(
                s["node"],
                s["onnx_name"],
                s["op"],
                s["pass"],
                s["fused_by"],
                s["rewritten_by"],
                _near_miss(s["nearest"]),
                s["reason"],
            )
            for s in fields["sites"]
        ]
        self.text: str = fields["text"]

    @property
    def fused(self) -> int:
        """Sites fused."""
        return sum(1 for s in self.sites if s.fused)

    @property
    def fused_by_rule(self) -> Dict[str, int]:
        """Sites fused, per rule."""
        out: Dict[str, int] = {}
        for s in self.sites:
            if s.fused_by is not None:
                out[s.fused_by] = out.get(s.fused_by, 0) + 1
        return out

    @property
    def not_fused_by_reason(self) -> Dict[str, int]:
        """Sites not fused, per reason."""
        out: Dict[str, int] = {}
        for s in self.sites:
            if s.reason is not None:
                out[s.reason] = out.get(s.reason, 0) + 1
        return out

    def __len__(self) -> int:
        return len(self.sites)

    def __str__(self) -> str:
        return self.text

    __repr__ = __str__


class RuleInfo(NamedTuple):
    """A built-in rule, as :func:`rules` lists it."""

    name: str
    """The rule's name (as the optimize report prints it)."""
    rule_set: str
    """Its rule set (``canonical``, ``attention``, ``norms``, a kernel's name)."""
    pass_: str
    """The pipeline pass that first runs it."""


def rules() -> List[RuleInfo]:
    """Every built-in rule, in pipeline order, as ``graphrw explain --list-rules`` lists
    them: every name the optimize report prints, each one :func:`explain` takes."""
    return [RuleInfo(*r) for r in _native.rules()]


def explain(
    model: ModelLike, rule: Optional[str] = None, node: Optional[str] = None
) -> Union[Coverage, str]:
    """Which sites of a model fused and why the others did not; or one rule's
    explanation, as ``graphrw explain`` prints it.

    Without ``rule``: a :class:`Coverage`, every site where a fusion could start (every
    softmax, normalisation, GELU, gate, rotation) with the rule that fused it or the
    nearest rule and its first failing check. With ``rule`` (any name :func:`rules`
    lists), the rule's text: its near misses over the model, deepest first, or with
    ``node`` (its printed name, ``t41``, or its ONNX name) where matching stopped at that
    node and why. Both look at the graph as the pipeline has it when the rule runs
    (after canonicalisation), whose names ``graphrw print MODEL --before PASS`` shows.

    Raises:
        LoadError, OptimizeError, InvalidArgument (an unknown rule or node).
    """
    src, _ = _source(model)
    if rule is None:
        if node is not None:
            raise InvalidArgument("node: give the rule to explain there as well")
        return Coverage(_native.coverage(src))
    return _native.explain(src, rule, node)

"""onnxruntime's Python session API on graphrw: ``InferenceSession``, ``SessionOptions``,
``GraphOptimizationLevel``, ``IOBinding``, ``OrtValue``, ``NodeArg``,
``ModelMetadata`` and the provider functions, so that code written for onnxruntime runs
with ``graphrw`` swapped in. What maps onto graphrw and what is accepted but has no
effect is listed in each docstring (and in the package README's drop-in section)."""

from __future__ import annotations

import collections.abc
import ctypes
import enum
import json
import math
import os
import sys
import threading
import time
import warnings
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _native
from ._errors import InvalidArgument, RunError

CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"

#: onnxruntime's execution provider names (``onnxruntime.get_all_providers()``): one of
#: these that graphrw does not run is warned about and the session runs on the CPU, as
#: onnxruntime does with a provider its build lacks; any other name is an error.
ALL_PROVIDERS = (
    "TensorrtExecutionProvider",
    CUDA_PROVIDER,
    "MIGraphXExecutionProvider",
    "ROCMExecutionProvider",
    "OpenVINOExecutionProvider",
    "DnnlExecutionProvider",
    "VitisAIExecutionProvider",
    "QNNExecutionProvider",
    "NnapiExecutionProvider",
    "VSINPUExecutionProvider",
    "JsExecutionProvider",
    "CoreMLExecutionProvider",
    "ArmNNExecutionProvider",
    "ACLExecutionProvider",
    "DmlExecutionProvider",
    "RknpuExecutionProvider",
    "WebNNExecutionProvider",
    "WebGpuExecutionProvider",
    "XnnpackExecutionProvider",
    "CANNExecutionProvider",
    "AzureExecutionProvider",
    CPU_PROVIDER,
)


def get_available_providers() -> List[str]:
    """The providers this build runs: ``CUDAExecutionProvider`` where built with the
    ``cuda`` feature, and ``CPUExecutionProvider``."""
    return ([CUDA_PROVIDER] if _native.has_cuda() else []) + [CPU_PROVIDER]


def get_all_providers() -> List[str]:
    """onnxruntime's provider names (graphrw runs those of
    :func:`get_available_providers`)."""
    return list(ALL_PROVIDERS)


def get_device() -> str:
    """``"GPU"`` where built with CUDA, else ``"CPU"`` (as ``onnxruntime.get_device``)."""
    return "GPU" if _native.has_cuda() else "CPU"


class GraphOptimizationLevel(enum.IntEnum):
    """onnxruntime's optimisation levels. ``ORT_DISABLE_ALL`` plans the model as loaded
    (no rewrite); every other level runs graphrw's whole pipeline (canonicalisation,
    attention fusion, causal masks, generated fused kernels), which has no finer
    levels."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    """onnxruntime's execution modes; accepted, without effect: graphrw runs nodes in
    order and each kernel on the plan's threads."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


#: Session config entries graphrw reads (``add_session_config_entry``).
WARMUP_ENTRY = "graphrw.warmup"


class SessionOptions:
    """onnxruntime's ``SessionOptions``, with the fields graphrw honours:

    - ``intra_op_num_threads``: threads for the plan's kernels (0, the default: the
      ``GRAPHRW_THREADS`` variable, else one per core).
    - ``graph_optimization_level``: :class:`GraphOptimizationLevel`; ``ORT_DISABLE_ALL``
      skips graphrw's rewrite.
    - ``enable_profiling`` and ``profile_file_prefix``: per-op times of every run, written
      by ``InferenceSession.end_profiling()`` as a JSON trace.
    - ``log_severity_level``: the session's messages at or above it go to stderr (0
      verbose, 1 info, 2 warning, the default, 3 error, 4 fatal).
    - ``optimized_model_filepath``: where to write the model after graphrw's rewrite.
    - ``add_free_dimension_override_by_name(name, size)``: the size the symbolic dim
      ``name`` takes in the warm-up run at construction (1 where none is given). Unlike
      onnxruntime, runs of other sizes are still accepted.
    - ``add_session_config_entry("graphrw.warmup", "0")``: no warm-up run.

    The other fields (``inter_op_num_threads``, ``execution_mode``, the memory arena and
    pattern switches, ``use_deterministic_compute``, ``log_verbosity_level``, ``logid``)
    are kept and have no effect. An ``onnxruntime.SessionOptions`` may be passed to
    :class:`InferenceSession` instead: its fields of the same names are read.
    """

    def __init__(self) -> None:
        self.intra_op_num_threads: int = 0
        self.inter_op_num_threads: int = 0
        self.graph_optimization_level: GraphOptimizationLevel = (
            GraphOptimizationLevel.ORT_ENABLE_ALL
        )
        self.execution_mode: ExecutionMode = ExecutionMode.ORT_SEQUENTIAL
        self.enable_profiling: bool = False
        self.profile_file_prefix: str = "graphrw_profile_"
        self.log_severity_level: int = -1
        self.log_verbosity_level: int = 0
        self.logid: str = ""
        self.optimized_model_filepath: str = ""
        self.enable_cpu_mem_arena: bool = True
        self.enable_mem_pattern: bool = True
        self.enable_mem_reuse: bool = True
        self.use_deterministic_compute: bool = False
        self.use_per_session_threads: bool = True
        self._config: Dict[str, str] = {}
        self._dims: Dict[str, int] = {}

    def add_session_config_entry(self, key: str, value: str) -> None:
        """Sets a config entry (graphrw reads ``graphrw.warmup``; others are kept)."""
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key: str) -> str:
        """A config entry set before; an ``InvalidArgument`` if none was."""
        try:
            return self._config[key]
        except KeyError:
            raise InvalidArgument(f"SessionOptions has no config entry `{key}`") from None

    def add_free_dimension_override_by_name(self, dim_name: str, dim_value: int) -> None:
        """The size of the symbolic dim ``dim_name`` in the warm-up run at construction."""
        if not isinstance(dim_value, int) or dim_value < 0:
            raise InvalidArgument(
                f"free dimension `{dim_name}`: expected a size >= 0, got {dim_value!r}"
            )
        self._dims[str(dim_name)] = dim_value

    def __repr__(self) -> str:
        return (
            f"SessionOptions(intra_op_num_threads={self.intra_op_num_threads}, "
            f"graph_optimization_level={self.graph_optimization_level!r}, "
            f"enable_profiling={self.enable_profiling}, "
            f"log_severity_level={self.log_severity_level})"
        )

    @classmethod
    def _read(cls, given: Any) -> "SessionOptions":
        """A copy of ``given``: a graphrw ``SessionOptions``, ``None`` (the defaults), or
        an object with the same fields (``onnxruntime.SessionOptions``), checked."""
        out = cls()
        if given is None:
            return out
        for field in (
            "intra_op_num_threads",
            "inter_op_num_threads",
            "graph_optimization_level",
            "execution_mode",
            "enable_profiling",
            "profile_file_prefix",
            "log_severity_level",
            "log_verbosity_level",
            "logid",
            "optimized_model_filepath",
            "enable_cpu_mem_arena",
            "enable_mem_pattern",
            "enable_mem_reuse",
            "use_deterministic_compute",
            "use_per_session_threads",
        ):
            if hasattr(given, field):
                setattr(out, field, getattr(given, field))
        if isinstance(given, SessionOptions):
            out._config = dict(given._config)
            out._dims = dict(given._dims)
        else:
            get = getattr(given, "get_session_config_entry", None)
            if callable(get):
                try:
                    out._config[WARMUP_ENTRY] = str(get(WARMUP_ENTRY))
                except Exception:  # onnxruntime raises where the entry is not set
                    pass
        threads = out.intra_op_num_threads
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
            raise InvalidArgument(
                f"sess_options.intra_op_num_threads: expected an int >= 0 (0: every core), "
                f"got {threads!r}"
            )
        try:
            level = int(out.graph_optimization_level)
        except (TypeError, ValueError):
            level = -1
        if level not in {int(v) for v in GraphOptimizationLevel}:
            raise InvalidArgument(
                "sess_options.graph_optimization_level: expected a GraphOptimizationLevel "
                f"(ORT_DISABLE_ALL, ORT_ENABLE_BASIC, ORT_ENABLE_EXTENDED, ORT_ENABLE_LAYOUT "
                f"or ORT_ENABLE_ALL), got {out.graph_optimization_level!r}"
            )
        out.graph_optimization_level = GraphOptimizationLevel(level)
        severity = out.log_severity_level
        if isinstance(severity, bool) or not isinstance(severity, int) or not -1 <= severity <= 4:
            raise InvalidArgument(
                f"sess_options.log_severity_level: expected an int from 0 (verbose) to 4 "
                f"(fatal), or -1 for the default, got {severity!r}"
            )
        warmup = out._config.get(WARMUP_ENTRY, "1")
        if warmup not in ("0", "1"):
            raise InvalidArgument(
                f"session config entry `{WARMUP_ENTRY}`: expected \"0\" or \"1\", got {warmup!r}"
            )
        out.enable_profiling = bool(out.enable_profiling)
        out.profile_file_prefix = str(out.profile_file_prefix)
        out.optimized_model_filepath = os.fspath(out.optimized_model_filepath or "")
        return out


class RunOptions:
    """onnxruntime's ``RunOptions``: accepted by ``run``; its fields have no effect
    except ``terminate``, which makes a run raise before it starts."""

    def __init__(self) -> None:
        self.log_severity_level: int = -1
        self.log_verbosity_level: int = 0
        self.logid: str = ""
        self.terminate: bool = False
        self.only_execute_path_to_fetches: bool = False

    def add_run_config_entry(self, key: str, value: str) -> None:
        """Kept, without effect."""


_SEVERITY_LETTERS = "VIWEF"


def _log(threshold: int, severity: int, message: str) -> None:
    """Writes ``message`` to stderr when ``severity`` is at or above ``threshold`` (-1:
    warnings and above, as onnxruntime's default)."""
    if severity >= (2 if threshold < 0 else threshold):
        print(f"graphrw [{_SEVERITY_LETTERS[severity]}] {message}", file=sys.stderr)


# --- types -------------------------------------------------------------------------

#: numpy dtype name -> (onnxruntime type string, ONNX element type number).
_TYPES: Dict[str, Tuple[str, int]] = {
    "float32": ("tensor(float)", 1),
    "uint8": ("tensor(uint8)", 2),
    "int8": ("tensor(int8)", 3),
    "uint16": ("tensor(uint16)", 4),
    "int16": ("tensor(int16)", 5),
    "int32": ("tensor(int32)", 6),
    "int64": ("tensor(int64)", 7),
    "bool": ("tensor(bool)", 9),
    "float16": ("tensor(float16)", 10),
    "float64": ("tensor(double)", 11),
    "uint32": ("tensor(uint32)", 12),
    "uint64": ("tensor(uint64)", 13),
    "bfloat16": ("tensor(bfloat16)", 16),
}
_BY_ELEMENT = {number: name for name, (_, number) in _TYPES.items()}

_SUPPORTED = (
    "float32",
    "float64",
    "float16",
    "bfloat16",
    "int64",
    "int32",
    "bool",
    "uint8",
    "int8",
    "int16",
    "uint16",
    "uint32",
    "uint64",
)

#: The numpy dtypes (native byte order) an input is read in place in, by dtype: a dict
#: lookup, since numpy computes ``dtype.name`` in Python, at more than a small copy costs.
_NAME_OF = {np.dtype(n): n for n in _SUPPORTED if n != "bfloat16"}

_byte_at = ctypes.c_byte.from_buffer


def _address(array: np.ndarray) -> int:
    """The address of a C-contiguous array's first element: through the buffer protocol
    (ctypes), or, for a read-only or empty array, through numpy's
    ``__array_interface__`` (ten times slower: it builds the dtype's description)."""
    try:
        return ctypes.addressof(_byte_at(array))
    except (TypeError, ValueError):
        return array.__array_interface__["data"][0]


def _bf16() -> Any:
    """ml_dtypes' bfloat16, or None without ml_dtypes."""
    try:
        import ml_dtypes  # type: ignore[import-not-found]
    except ImportError:
        return None
    return ml_dtypes.bfloat16


def _numpy_dtype(element_type: Any, what: str) -> np.dtype:
    """The numpy dtype of ``element_type``: a numpy type or dtype, or an ONNX element
    type number (``onnx.TensorProto.FLOAT``), as onnxruntime's ``IOBinding`` takes."""
    if isinstance(element_type, int) and not isinstance(element_type, bool):
        name = _BY_ELEMENT.get(element_type)
        if name is None:
            raise InvalidArgument(
                f"{what}: ONNX element type {element_type} has no numpy dtype graphrw takes"
            )
        if name == "bfloat16":
            bf16 = _bf16()
            if bf16 is None:
                raise InvalidArgument(f"{what}: bfloat16 needs ml_dtypes installed")
            return np.dtype(bf16)
        return np.dtype(name)
    try:
        return np.dtype(element_type)
    except TypeError:
        raise InvalidArgument(
            f"{what}: expected a numpy type (numpy.float32) or an ONNX element type "
            f"number, got {element_type!r}"
        ) from None


def _array(native: Any) -> np.ndarray:
    """A numpy array over a native ``Array``: graphrw's buffer itself, not a copy (its
    ``base`` is the native object, which keeps the buffer alive). A bfloat16 buffer is
    viewed as ml_dtypes' bfloat16, or, without ml_dtypes, widened to a float32 copy."""
    array = np.asarray(native)
    if array.dtype.char == "H" and native.dtype == "bfloat16":
        bf16 = _bf16()
        if bf16 is not None:
            return array.view(bf16)
        # bf16 is the top half of a float32.
        return (array.astype(np.uint32) << 16).view(np.float32)
    return array


def _cpu_device(device_type: Any, what: str) -> None:
    """Refuses a device other than the CPU for a bound buffer."""
    if str(device_type).lower() != "cpu":
        raise InvalidArgument(
            f"{what}: device {device_type!r}: graphrw binds buffers in CPU memory only "
            "(device_type='cpu')"
        )


def _view(buffer_ptr: int, dtype: np.dtype, shape: Sequence[int], what: str) -> np.ndarray:
    """A numpy array over ``prod(shape)`` elements of ``dtype`` at address ``buffer_ptr``
    (no copy): the caller's buffer, read or written at each run."""
    try:
        dims = [int(d) for d in shape]
    except (TypeError, ValueError):
        raise InvalidArgument(f"{what}: shape: expected a list of sizes, got {shape!r}") from None
    if any(d < 0 for d in dims):
        raise InvalidArgument(f"{what}: shape {dims}: sizes must be >= 0")
    if not isinstance(buffer_ptr, int) or buffer_ptr <= 0:
        raise InvalidArgument(f"{what}: buffer_ptr: expected a nonzero address, got {buffer_ptr!r}")
    nbytes = math.prod(dims) * dtype.itemsize
    raw = (ctypes.c_char * max(nbytes, 1)).from_address(buffer_ptr)
    return np.frombuffer(raw, dtype=np.uint8, count=nbytes).view(dtype).reshape(dims)


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


class ModelMetadata:
    """The model's metadata, as onnxruntime's ``ModelMetadata``: ``producer_name``,
    ``graph_name``, ``domain``, ``description`` (the model's doc string),
    ``graph_description``, ``version`` (``model_version``; 2**63 - 1 where the model
    does not set it, as onnxruntime reports) and ``custom_metadata_map``
    (``metadata_props``)."""

    def __init__(self, fields: Mapping[str, Any]):
        self.producer_name: str = fields["producer_name"]
        self.graph_name: str = fields["graph_name"]
        self.domain: str = fields["domain"]
        self.description: str = fields["description"]
        self.graph_description: str = fields["graph_description"]
        version = fields["version"]
        self.version: int = (1 << 63) - 1 if version is None else version
        self.custom_metadata_map: Dict[str, str] = dict(fields["custom_metadata_map"])
        #: ``producer_version`` (onnxruntime does not show it).
        self.producer_version: str = fields["producer_version"]

    def __repr__(self) -> str:
        return (
            f"ModelMetadata(producer_name={self.producer_name!r}, graph_name="
            f"{self.graph_name!r}, domain={self.domain!r}, version={self.version})"
        )


class OrtValue:
    """A tensor as onnxruntime's ``OrtValue``: a numpy array in CPU memory, or an output
    a run left in graphrw's memory (an ``IOBinding``'s), read by :meth:`numpy` (a
    copy)."""

    def __init__(self, array: Optional[np.ndarray] = None, _kept: Any = None, _index: int = 0):
        if array is None and _kept is None:
            raise InvalidArgument(
                "OrtValue: expected a numpy array (use OrtValue.ortvalue_from_numpy)"
            )
        self._array = array
        self._kept = _kept
        self._index = _index

    @staticmethod
    def ortvalue_from_numpy(numpy_obj: Any, device_type: str = "cpu", device_id: int = 0) -> "OrtValue":
        """Wraps a numpy array (not copied: a bound input reads it at each run)."""
        _cpu_device(device_type, "OrtValue.ortvalue_from_numpy")
        return OrtValue(np.asarray(numpy_obj))

    @staticmethod
    def ortvalue_from_shape_and_type(
        shape: Sequence[int], element_type: Any, device_type: str = "cpu", device_id: int = 0
    ) -> "OrtValue":
        """A zero-filled tensor of ``shape`` and ``element_type`` (a numpy type or an ONNX
        element type number)."""
        _cpu_device(device_type, "OrtValue.ortvalue_from_shape_and_type")
        dtype = _numpy_dtype(element_type, "OrtValue.ortvalue_from_shape_and_type")
        return OrtValue(np.zeros([int(d) for d in shape], dtype=dtype))

    def _info(self) -> Tuple[str, List[int]]:
        if self._array is not None:
            return self._array.dtype.name, list(self._array.shape)
        dtype, shape = self._kept.info(self._index)
        return dtype, list(shape)

    def numpy(self) -> np.ndarray:
        """The values as a numpy array: a writable copy of an output kept in graphrw's
        memory (as onnxruntime's ``OrtValue.numpy()`` copies), the wrapped array itself
        otherwise."""
        if self._array is not None:
            return self._array
        return np.array(_array(self._kept.array(self._index)))

    def _view(self) -> np.ndarray:
        """A read-only numpy array over an output kept in graphrw's memory (no copy; the
        buffer stays out of the session's pool while the array lives)."""
        if self._array is not None:
            return self._array
        return _array(self._kept.array(self._index))

    def shape(self) -> List[int]:
        """The dims."""
        return self._info()[1]

    def data_type(self) -> str:
        """onnxruntime's type string (``"tensor(float)"``)."""
        return _TYPES.get(self._info()[0], ("tensor(unknown)", 0))[0]

    def element_type(self) -> int:
        """The ONNX element type number (``1`` for float)."""
        return _TYPES.get(self._info()[0], ("", 0))[1]

    def device_name(self) -> str:
        """``"cpu"``."""
        return "cpu"

    def is_tensor(self) -> bool:
        return True

    def has_value(self) -> bool:
        return True

    def is_sparse_tensor(self) -> bool:
        return False

    def is_tensor_sequence(self) -> bool:
        return False

    def tensor_size_in_bytes(self) -> int:
        dtype, shape = self._info()
        itemsize = 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize
        return math.prod(shape) * itemsize

    def data_ptr(self) -> int:
        """The address of the data: a wrapped numpy array's, or, for an output kept in
        graphrw's memory, graphrw's buffer (read-only; valid while the ``IOBinding``
        holds that run's outputs)."""
        if self._array is None:
            return int(self._view().__array_interface__["data"][0])
        return int(self._array.ctypes.data)

    def __repr__(self) -> str:
        dtype, shape = self._info()
        return f"OrtValue({self.data_type()}, shape={shape})"


def _values_of(value: Any, what: str) -> np.ndarray:
    """The array of a bound or fed value: a numpy array, a graphrw ``OrtValue``, or
    anything with ``numpy()`` (``onnxruntime.OrtValue``)."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, OrtValue):
        return value.numpy()
    to_numpy = getattr(value, "numpy", None)
    if callable(to_numpy):
        return np.asarray(to_numpy())
    raise InvalidArgument(f"{what}: expected a numpy array or an OrtValue, got {type(value).__name__}")


class IOBinding:
    """onnxruntime's ``IOBinding``: inputs bound to numpy arrays (or CPU buffers by
    address), outputs bound by name, run by ``InferenceSession.run_with_iobinding``.

    A bound input is read at each run (not copied at bind time). Bound outputs stay in
    graphrw's memory after a run (``get_outputs()`` gives ``OrtValue``s over them,
    ``copy_outputs_to_cpu()`` numpy copies); when the next run starts, the previous
    outputs no longer referenced are handed back to the session's buffer pool, which
    that run draws its outputs from. An output bound to a buffer (``buffer_ptr`` or
    ``bind_ortvalue_output``) is written there after each run.
    """

    def __init__(self, session: "InferenceSession"):
        self._session = session
        self._inputs: Dict[str, np.ndarray] = {}
        #: Output name -> the array each run writes into, or None (kept in graphrw).
        self._outputs: Dict[str, Optional[np.ndarray]] = {}
        self._result: Any = None
        self._result_index: Dict[str, int] = {}

    def _input_name(self, name: str) -> str:
        if name not in self._session._input_index:
            raise InvalidArgument(
                f"unknown input name {name!r} (the model's inputs: "
                f"{', '.join(self._session._input_index)})"
            )
        return name

    def _output_name(self, name: str) -> str:
        if name not in self._session._output_index:
            raise InvalidArgument(
                f"unknown output name {name!r} (the model's outputs: "
                f"{', '.join(self._session._output_index)})"
            )
        return name

    def bind_cpu_input(self, name: str, arr_on_cpu: Any) -> None:
        """Binds input ``name`` to a numpy array (read at each run, not copied now)."""
        self._inputs[self._input_name(name)] = (
            arr_on_cpu if isinstance(arr_on_cpu, np.ndarray) else np.asarray(arr_on_cpu)
        )

    def bind_input(
        self,
        name: str,
        device_type: Any,
        device_id: int,
        element_type: Any,
        shape: Sequence[int],
        buffer_ptr: int,
    ) -> None:
        """Binds input ``name`` to ``prod(shape)`` elements of ``element_type`` at address
        ``buffer_ptr`` in CPU memory (``device_type='cpu'``), read at each run."""
        what = f"bind_input `{name}`"
        _cpu_device(device_type, what)
        dtype = _numpy_dtype(element_type, what)
        self._inputs[self._input_name(name)] = _view(buffer_ptr, dtype, shape, what)

    def bind_ortvalue_input(self, name: str, ortvalue: Any) -> None:
        """Binds input ``name`` to an ``OrtValue`` (graphrw's or onnxruntime's)."""
        self._inputs[self._input_name(name)] = _values_of(ortvalue, f"input `{name}`")

    def bind_output(
        self,
        name: str,
        device_type: Any = "cpu",
        device_id: int = 0,
        element_type: Any = None,
        shape: Optional[Sequence[int]] = None,
        buffer_ptr: Optional[int] = None,
    ) -> None:
        """Binds output ``name``: kept in graphrw's memory after each run, or, with
        ``buffer_ptr``, written to ``prod(shape)`` elements of ``element_type`` there."""
        what = f"bind_output `{name}`"
        _cpu_device(device_type, what)
        self._output_name(name)
        if buffer_ptr is None:
            self._outputs[name] = None
            return
        if element_type is None or shape is None:
            raise InvalidArgument(
                f"{what}: `element_type` and `shape` are to be provided if pre-allocated "
                "memory is provided"
            )
        self._outputs[name] = _view(buffer_ptr, _numpy_dtype(element_type, what), shape, what)

    def bind_ortvalue_output(self, name: str, ortvalue: Any) -> None:
        """Binds output ``name`` to an ``OrtValue`` over a numpy array, written at each
        run."""
        self._output_name(name)
        target = _values_of(ortvalue, f"output `{name}`")
        if not target.flags.writeable or not target.flags.c_contiguous:
            raise InvalidArgument(
                f"output `{name}`: the bound array must be writable and C-contiguous"
            )
        self._outputs[name] = target

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._result = None
        self._result_index = {}

    def synchronize_inputs(self) -> None:
        """Nothing to wait for: inputs are read when the run starts."""

    def synchronize_outputs(self) -> None:
        """Nothing to wait for: a run returns when its outputs are written."""

    def get_outputs(self) -> List[OrtValue]:
        """The bound outputs of the last run, in binding order (empty before a run)."""
        if self._result is None:
            return []
        out = []
        for name, target in self._outputs.items():
            if name not in self._result_index:
                continue  # bound after the run
            if target is not None:
                out.append(OrtValue(target))
            else:
                out.append(OrtValue(None, self._result, self._result_index[name]))
        return out

    get_outputs_as_ortvaluevector = get_outputs

    def copy_outputs_to_cpu(self) -> List[np.ndarray]:
        """The bound outputs of the last run as numpy arrays (copies)."""
        out = []
        for v in self.get_outputs():
            a = v.numpy()
            out.append(a.copy() if v._array is not None else a)
        return out

    def _run(self, run_options: Any) -> None:
        session = self._session
        missing = [n for n in session._input_index if n not in self._inputs]
        if missing:
            raise InvalidArgument(
                f"run_with_iobinding: input(s) not bound: {', '.join(missing)} "
                "(bind each with bind_cpu_input or bind_input)"
            )
        if not self._outputs:
            raise InvalidArgument(
                "run_with_iobinding: no output is bound (bind at least one with bind_output)"
            )
        # The last run's outputs go back to the pool (where nothing else holds them)
        # before this run draws its own.
        self._result = None
        self._result_index = {}
        feeds = session._feeds(self._inputs)
        kept = session._run_native(feeds, run_options, keep=True)
        names = list(self._outputs)
        index = {name: session._output_index[name] for name in names}
        for name, target in self._outputs.items():
            if target is None:
                continue
            dtype, shape = kept.info(index[name])
            if list(target.shape) != list(shape) or target.dtype.name != dtype:
                raise InvalidArgument(
                    f"output `{name}`: the run made {dtype}{list(shape)}, the bound buffer "
                    f"holds {target.dtype.name}{list(target.shape)}"
                )
            target.reshape(-1).view(np.uint8)[:] = np.asarray(kept.array(index[name])).reshape(-1).view(np.uint8)
        self._result = kept
        self._result_index = index


class InferenceSession:
    """onnxruntime's ``InferenceSession`` on graphrw: the model is loaded, optimised by
    graphrw's default pipeline (attention fusion, causal masks, generated fused kernels;
    a rewrite that fails leaves the model as loaded), planned on the default executor
    stack and run once on zeros at construction (the warm-up: weights are packed,
    kernels chosen and buffers pooled then, so the first ``run`` costs about what a
    steady one does; ``timings`` says how long each step took).

    Inputs and outputs are numpy arrays of float32, float64, float16, bfloat16
    (``ml_dtypes.bfloat16``), int64, int32, int16, int8, uint64, uint32, uint16, uint8
    or bool. numpy has no bfloat16 of its
    own: a bf16 output comes back as ``ml_dtypes.bfloat16`` when ``ml_dtypes`` is
    installed (``onnx`` depends on it), else as float32 (exact); a bf16 input takes
    either, float32 rounded to bf16.

    Args:
        path_or_bytes: a path, the bytes of an ONNX model, or an ``onnx.ModelProto``.
        sess_options: a :class:`SessionOptions` or an ``onnxruntime.SessionOptions``.
        providers: execution providers in order of preference, names or ``(name,
            options)`` pairs: ``"CUDAExecutionProvider"`` (``device_id`` option) where
            this build has CUDA, ``"CPUExecutionProvider"``. Another of onnxruntime's
            providers is warned about and the session runs on the CPU; a name
            onnxruntime does not know is an ``InvalidArgument``.
        provider_options: one options dict per provider name.
        optimize: graphrw's own switch: ``False`` runs the model as loaded on the
            reference kernels (``graphrw run --executors reference``).
        assume: graphrw's own: lower bounds on symbolic dims, ``"seq>=1"`` or a list
            of them (as :func:`graphrw.optimize` takes them); a run whose inputs break
            one is refused naming the input.
        disabled_optimizers, read_config_from_model: onnxruntime's; accepted, ignored.

    Raises:
        LoadError, RunError (the model cannot be planned), InvalidArgument (options).
    """

    _KWARGS_IGNORED = ("disabled_optimizers", "read_config_from_model")

    def __init__(
        self,
        path_or_bytes: Any,
        sess_options: Any = None,
        providers: Optional[Sequence[Any]] = None,
        provider_options: Optional[Sequence[Mapping[str, Any]]] = None,
        **kwargs: Any,
    ):
        optimize = kwargs.pop("optimize", True)
        assume = kwargs.pop("assume", None)
        unknown = [k for k in kwargs if k not in self._KWARGS_IGNORED]
        if unknown:
            raise TypeError(
                f"InferenceSession got unexpected keyword argument(s) {', '.join(unknown)} "
                f"(takes sess_options, providers, provider_options, optimize, assume, "
                f"{', '.join(self._KWARGS_IGNORED)})"
            )
        #: The model as given (a path, bytes or a ModelProto), planned again by
        #: set_providers.
        self._model = path_or_bytes
        self._options = SessionOptions._read(sess_options)
        self._optimize = bool(optimize)
        from . import _assumed  # the package's reading of an assume argument

        self._assume = _assumed(assume)
        self._profiling_lock = threading.Lock()
        self._create(providers, provider_options)

    # --- construction ------------------------------------------------------------

    def _create(self, providers: Any, provider_options: Any) -> None:
        from . import _source  # the package's reading of a model argument

        names, options = _normalize_providers(providers, provider_options)
        src, _ = _source(self._model)
        opts = self._options
        cuda = CUDA_PROVIDER in names and CUDA_PROVIDER in get_available_providers()
        # onnxruntime runs the first available provider listed and the CPU for the rest.
        if cuda and CPU_PROVIDER in names and names.index(CPU_PROVIDER) < names.index(CUDA_PROVIDER):
            cuda = False
        if not self._optimize:
            level = "reference"
        elif opts.graph_optimization_level == GraphOptimizationLevel.ORT_DISABLE_ALL:
            level = "none"
        else:
            level = "all"
        warmup = opts._config.get(WARMUP_ENTRY, "1") == "1"
        self._profile_start_ns = time.time_ns()
        args = dict(
            level=level,
            threads=opts.intra_op_num_threads,
            optimized_model_path=opts.optimized_model_filepath or None,
            warmup=warmup,
            dims=dict(opts._dims),
            assume=list(self._assume),
        )
        provider_opts: Dict[str, Dict[str, str]] = {}
        if cuda:
            cuda_opts = dict(options[names.index(CUDA_PROVIDER)])
            device_id = cuda_opts.get("device_id", "0")
            if not device_id.isdigit():
                raise InvalidArgument(
                    f"CUDAExecutionProvider option device_id: expected a device number, "
                    f"got {device_id!r}"
                )
            cuda_opts["device_id"] = device_id
            try:
                self._session = _native.Session(src, device=f"cuda:{device_id}", **args)
                self._providers = [CUDA_PROVIDER, CPU_PROVIDER]
                provider_opts[CUDA_PROVIDER] = cuda_opts
            except RunError as e:
                # onnxruntime falls back to the CPU when a provider fails to start.
                warnings.warn(f"CUDAExecutionProvider failed ({e}); running on the CPU")
                cuda = False
        if not cuda:
            self._session = _native.Session(src, device="cpu", **args)
            self._providers = [CPU_PROVIDER]
        provider_opts[CPU_PROVIDER] = (
            dict(options[names.index(CPU_PROVIDER)]) if CPU_PROVIDER in names else {}
        )
        self._provider_options = provider_opts
        # Read now (a scan of the model's top-level fields), so the serialised model of a
        # ModelProto need not be kept.
        self._meta = _native.model_meta(src)
        self._inputs = [_node_arg(i) for i in self._session.inputs()]
        self._outputs = [_node_arg(o) for o in self._session.outputs()]
        self._feed_dtypes = list(self._session.feed_dtypes())
        #: Per input, the dtype an array is read in place in (None: a bf16 input fed as
        #: float32, always converted).
        self._in_place = [
            want if arg.dtype == want else None for arg, want in zip(self._inputs, self._feed_dtypes)
        ]
        self._input_index = {a.name: k for k, a in enumerate(self._inputs)}
        self._output_index = {o.name: k for k, o in enumerate(self._outputs)}
        for severity, message in self._session.notes():
            _log(opts.log_severity_level, severity, message)
        self._profiling = opts.enable_profiling
        self._events: List[Dict[str, Any]] = []
        if self._profiling:
            t = self._session.timings()
            self._event("Session", "model_loading", 0.0, t["load"])
            self._event("Session", "session_initialization", 0.0, t["total"])

    def set_providers(
        self,
        providers: Optional[Sequence[Any]] = None,
        provider_options: Optional[Sequence[Mapping[str, Any]]] = None,
    ) -> None:
        """Plans the model again for ``providers`` (as onnxruntime re-initialises)."""
        self._create(providers, provider_options)

    def disable_fallback(self) -> None:
        """Accepted: graphrw falls back to the CPU only at construction."""

    def enable_fallback(self) -> None:
        """Accepted: graphrw falls back to the CPU only at construction."""

    # --- what the session is ---------------------------------------------------------

    def get_inputs(self) -> List[NodeArg]:
        """The graph inputs, in order."""
        return list(self._inputs)

    def get_outputs(self) -> List[NodeArg]:
        """The graph outputs, in order."""
        return list(self._outputs)

    def get_overridable_initializers(self) -> List[NodeArg]:
        """None: graphrw plans initialisers as constants."""
        return []

    def get_providers(self) -> List[str]:
        """The providers the session runs on: ``["CPUExecutionProvider"]``, or CUDA then
        the CPU."""
        return list(self._providers)

    def get_provider_options(self) -> Dict[str, Dict[str, str]]:
        """The options of each provider in use, as strings."""
        return {k: dict(v) for k, v in self._provider_options.items()}

    def get_session_options(self) -> SessionOptions:
        """A copy of the options the session was made with (graphrw's class, whichever
        was given)."""
        return SessionOptions._read(self._options)

    def get_modelmeta(self) -> ModelMetadata:
        """The model's metadata (read from the model's top-level fields)."""
        return ModelMetadata(self._meta)

    def get_profiling_start_time_ns(self) -> int:
        """When profiling started (the session's construction), in ns since the epoch."""
        return self._profile_start_ns

    @property
    def optimized(self) -> str:
        """What the optimiser did (``nodes: a -> b`` and the fused ops)."""
        return self._session.optimized()

    @property
    def timings(self) -> Dict[str, float]:
        """Seconds spent at construction: ``load``, ``optimize``, ``plan``, ``warmup``
        (the run on zeros) and ``total``."""
        return dict(self._session.timings())

    @property
    def warmup_error(self) -> Optional[str]:
        """Why the warm-up run failed (then the first ``run`` does its one-time work),
        or ``None``."""
        return self._session.warmup_error()

    @property
    def threads(self) -> Optional[int]:
        """Threads for the plan's kernels (``None``: one per core)."""
        return self._session.threads()

    # --- running ---------------------------------------------------------------------

    def _feed(self, k: int, value: Any) -> "tuple[str, Sequence[int], int, np.ndarray]":
        """Input ``k`` as the native session reads it: dtype name, shape, the address of
        its first element and the array (C-contiguous, native byte order), which graphrw
        reads in place; a copy is made only where ``value`` is not such an array of the
        input's dtype (a strided view, a big-endian array, a list)."""
        if type(value) is np.ndarray and value.flags.c_contiguous:
            name = _NAME_OF.get(value.dtype)
            if name is not None and name == self._in_place[k]:
                return name, value.shape, _address(value), value
        return self._feed_converted(k, value)

    def _feed_converted(self, k: int, value: Any) -> "tuple[str, Sequence[int], int, np.ndarray]":
        """``_feed`` for a value that is not already a C-contiguous array of the dtype
        the plan takes: converted (copied) as needed."""
        arg = self._inputs[k]
        if isinstance(value, OrtValue) or (
            not isinstance(value, np.ndarray) and callable(getattr(value, "numpy", None))
        ):
            value = _values_of(value, f"input `{arg.name}`")
        if isinstance(value, np.ndarray):
            array = value
        else:
            dtype = _bf16() if arg.dtype == "bfloat16" else arg.dtype
            array = np.asarray(value, dtype=dtype if dtype is not None else np.float32)
        name = array.dtype.name
        if name not in _SUPPORTED:
            raise InvalidArgument(
                f"input `{arg.name}`: unsupported dtype {array.dtype} "
                f"(graphrw takes {', '.join(_SUPPORTED)})"
            )
        if array.dtype.byteorder == ">":
            array = array.astype(array.dtype.newbyteorder("<"))
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        return name, array.shape, _address(array), array

    def _feeds(self, input_feed: Mapping[str, Any]) -> List["tuple[str, List[int], int, np.ndarray]"]:
        if not isinstance(input_feed, Mapping):
            raise InvalidArgument("input_feed: expected a dict of input name -> array")
        unknown = [k for k in input_feed if k not in self._input_index]
        if unknown:
            raise InvalidArgument(
                f"unknown input name(s) {', '.join(map(repr, unknown))} "
                f"(the model's inputs: {', '.join(sorted(self._input_index))})"
            )
        missing = [a.name for a in self._inputs if a.name not in input_feed]
        if missing:
            raise InvalidArgument(f"missing input(s): {', '.join(missing)}")
        return [self._feed(k, input_feed[a.name]) for k, a in enumerate(self._inputs)]

    def _output_indices(self, output_names: Optional[Sequence[str]]) -> List[int]:
        if output_names is None:
            return list(range(len(self._outputs)))
        if isinstance(output_names, str):
            raise InvalidArgument("output_names: expected a list of names or None")
        bad = [n for n in output_names if n not in self._output_index]
        if bad:
            raise InvalidArgument(
                f"unknown output name(s) {', '.join(map(repr, bad))} "
                f"(the model's outputs: {', '.join(self._output_index)})"
            )
        return [self._output_index[n] for n in output_names]

    def _run_native(self, feeds: Any, run_options: Any, keep: bool) -> Any:
        if run_options is not None and getattr(run_options, "terminate", False):
            raise RunError("the run was not started: run_options.terminate is set")
        profile = self._profiling
        started = time.time_ns()
        runner = self._session.run_kept if keep else self._session.run
        result, times = runner(feeds, profile)
        if profile and times is not None:
            self._record_run((started - self._profile_start_ns) / 1e3, times)
        return result

    def run(
        self,
        output_names: Optional[Sequence[str]],
        input_feed: Mapping[str, Any],
        run_options: Any = None,
    ) -> List[np.ndarray]:
        """Runs the model, as onnxruntime's ``InferenceSession.run``.

        Args:
            output_names: the outputs to return, by name, or ``None`` for all.
            input_feed: every input by name, as a numpy array (or an ``OrtValue``, or
                anything ``numpy.asarray`` takes, converted to the input's dtype).
            run_options: a ``RunOptions`` (graphrw's or onnxruntime's); only
                ``terminate`` has an effect.

        Returns:
            The outputs as numpy arrays, in the order of ``output_names``.

        Raises:
            InvalidArgument (an unknown or missing name, an array of the wrong dtype or
            shape), RunError.
        """
        feeds = self._feeds(input_feed)
        wanted = self._output_indices(output_names)
        raw = self._run_native(feeds, run_options, keep=False)
        return [_array(raw[k]) for k in wanted]

    def decode_loop(self) -> "DecodeLoop":
        """A generation loop over this session (see :class:`DecodeLoop`): each step's
        ``present*`` outputs are fed back as the next step's ``past*`` inputs (pairs
        found by name: ``present_key_0`` / ``past_key_0``, ``present.0.key`` /
        ``past_key_values.0.key``), the caches growing in place.

        Raises:
            InvalidArgument: the model has no such pairs.
        """
        return DecodeLoop(self, self._session.decode_loop())

    def run_with_ort_values(
        self, output_names: Optional[Sequence[str]], input_dict_ort_values: Mapping[str, Any],
        run_options: Any = None,
    ) -> List[OrtValue]:
        """``run`` on ``OrtValue`` inputs, the outputs as ``OrtValue``s."""
        return [OrtValue(a) for a in self.run(output_names, input_dict_ort_values, run_options)]

    def io_binding(self) -> IOBinding:
        """A new :class:`IOBinding` for this session."""
        return IOBinding(self)

    def run_with_iobinding(self, iobinding: IOBinding, run_options: Any = None) -> None:
        """Runs on the binding's inputs; its bound outputs hold the results."""
        if not isinstance(iobinding, IOBinding) or iobinding._session is not self:
            raise InvalidArgument(
                "run_with_iobinding: expected an IOBinding made by this session's io_binding()"
            )
        iobinding._run(run_options)

    # --- profiling -------------------------------------------------------------------

    def _event(self, cat: str, name: str, ts_us: float, seconds: float, **args: Any) -> None:
        self._events.append(
            {
                "cat": cat,
                "pid": os.getpid(),
                "tid": threading.get_ident(),
                "dur": int(round(seconds * 1e6)),
                "ts": int(round(ts_us)),
                "ph": "X",
                "name": name,
                "args": args,
            }
        )

    def _record_run(self, ts_us: float, times: Any) -> None:
        total, per_op = times
        provider = self._providers[0]
        with self._profiling_lock:
            self._event("Session", "model_run", ts_us, total)
            # graphrw times each op (all its nodes together) per run: one event per op,
            # laid one after another within the run.
            at = ts_us
            for op, seconds, calls in sorted(per_op, key=lambda r: -r[1]):
                self._event(
                    "Node", f"{op}_kernel_time", at, seconds,
                    op_name=op, calls=calls, provider=provider,
                )
                at += seconds * 1e6

    def end_profiling(self) -> str:
        """Ends profiling and writes what it recorded (the session's construction, then
        each run and its time per op) as a JSON trace (Chrome's trace event format, as
        onnxruntime writes) to ``<profile_file_prefix>_<date>_<time>.json`` in the current
        folder; returns that file name, or ``""`` where profiling was not on."""
        with self._profiling_lock:
            if not self._profiling:
                return ""
            self._profiling = False
            events, self._events = self._events, []
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
        path = f"{self._options.profile_file_prefix}_{stamp}.json"
        with open(path, "w") as f:
            # One event a line, as onnxruntime writes its trace.
            f.write("[\n" + ",\n".join(json.dumps(e) for e in events) + "\n]\n")
        return path


def _normalize_providers(
    providers: Any, provider_options: Any
) -> "tuple[List[str], List[Dict[str, str]]]":
    """Provider names and their options (as strings), checked as onnxruntime checks
    them; an unavailable provider of onnxruntime's is warned about, an unknown name is an
    ``InvalidArgument``."""
    if providers is None:
        return [], []
    if isinstance(providers, str) or not isinstance(providers, collections.abc.Sequence):
        raise InvalidArgument("'providers' should be a sequence of names or (name, options) pairs")
    pairs: List[Tuple[str, Mapping[Any, Any]]] = []
    if provider_options is not None:
        if not isinstance(provider_options, collections.abc.Sequence):
            raise InvalidArgument("'provider_options' should be a sequence.")
        if len(providers) != len(provider_options):
            raise InvalidArgument(
                "'providers' and 'provider_options' should be the same length if both are given."
            )
        if not all(isinstance(p, str) for p in providers):
            raise InvalidArgument(
                "Only string values for 'providers' are supported if 'provider_options' is given."
            )
        if not all(isinstance(o, dict) for o in provider_options):
            raise InvalidArgument("'provider_options' values must be dicts.")
        pairs = list(zip(providers, provider_options))
    else:
        for p in providers:
            if isinstance(p, str):
                pairs.append((p, {}))
            elif (
                isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str)
                and isinstance(p[1], dict)
            ):
                pairs.append((p[0], p[1]))
            else:
                raise InvalidArgument(
                    "'providers' values must be either strings or (string, dict) tuples."
                )
    available = get_available_providers()
    names: List[str] = []
    options: List[Dict[str, str]] = []
    for name, opts in pairs:
        if name not in ALL_PROVIDERS:
            raise InvalidArgument(
                f"unknown execution provider {name!r} (graphrw runs "
                f"{', '.join(available)}; onnxruntime's other providers fall back to the CPU)"
            )
        if name not in available:
            warnings.warn(
                f"Specified provider '{name}' is not in available provider names."
                f"Available providers: '{', '.join(available)}'"
            )
        if name in names:
            warnings.warn(f"Duplicate provider '{name}' encountered, ignoring.")
            continue
        names.append(name)
        options.append({str(k): str(v) for k, v in opts.items()})
    return names, options


class DecodeLoop:
    """A decoder step run again and again (graphrw's own API; onnxruntime has none).

    Each step takes the model's inputs that are not caches and returns its outputs that
    are not; the ``present*`` outputs stay in graphrw's memory and are the next step's
    ``past*`` inputs. A present that the model computes as ``concat(past, new)`` is kept
    in a buffer with spare capacity, so the next step appends its new rows instead of
    copying the cache, and attention reads the cache where it is. The outputs are those
    of running the steps one by one through :meth:`InferenceSession.run`, bit for bit.

    Example::

        loop = sess.decode_loop()
        loop.start(batch=1)                      # empty caches
        logits, = loop.step({"input_ids": prompt, "attention_mask": mask,
                             "position_ids": positions})
        for _ in range(steps):
            token = logits[:, -1:].argmax(-1)
            logits, = loop.step({"input_ids": token, ...})
    """

    def __init__(self, session: InferenceSession, native: Any):
        self._session = session
        self._native = native
        pairs = native.pairs()
        self._pasts = [p[0] for p in pairs]
        self._presents = [p[1] for p in pairs]
        inputs, outputs = session._inputs, session._outputs
        self._feeds = [k for k in range(len(inputs)) if k not in self._pasts]

    @property
    def cache_names(self) -> List["tuple[str, str]"]:
        """The pairs fed back, as ``(past input name, present output name)``."""
        return [
            (self._session._inputs[i].name, self._session._outputs[o].name)
            for i, o in zip(self._pasts, self._presents)
        ]

    @property
    def input_names(self) -> List[str]:
        """The inputs each step takes (the model's, without the caches)."""
        return [self._session._inputs[k].name for k in self._feeds]

    @property
    def output_names(self) -> List[str]:
        """The outputs each step returns (the model's, without the presents)."""
        return [o.name for k, o in enumerate(self._session._outputs) if k not in self._presents]

    def start(self, caches: Optional[Mapping[str, Any]] = None, batch: int = 1) -> None:
        """(Re)starts the loop from ``caches`` (past input name -> array, every pair's),
        or, when ``None``, from empty caches: each past input's dims with its first
        symbolic dim ``batch`` and its next one 0 (``[batch, heads, 0, head_dim]``).

        Raises:
            InvalidArgument: a cache is missing, of the wrong dtype, or (for empty
                caches) a past input has other symbolic dims.
        """
        values = []
        for k in self._pasts:
            arg = self._session._inputs[k]
            if caches is not None:
                if arg.name not in caches:
                    raise InvalidArgument(f"start: no cache for `{arg.name}`")
                values.append(self._session._feed(k, caches[arg.name]))
                continue
            shape, symbolic = [], 0
            for d in arg.shape:
                if isinstance(d, int) or (isinstance(d, str) and d.isdigit()):
                    shape.append(int(d))
                    continue
                if symbolic > 1:
                    raise InvalidArgument(
                        f"start: `{arg.name}` {arg.shape} has more than two symbolic dims; "
                        "give its first cache"
                    )
                shape.append(batch if symbolic == 0 else 0)
                symbolic += 1
            dtype = _bf16() if arg.dtype == "bfloat16" else arg.dtype
            values.append(self._session._feed(k, np.zeros(shape, dtype=dtype)))
        self._native.start(values)

    def step(self, input_feed: Mapping[str, Any]) -> List[np.ndarray]:
        """One step on ``input_feed`` (every name of :attr:`input_names`); returns the
        outputs of :attr:`output_names`, in order.

        Raises:
            InvalidArgument (an unknown or missing name, a wrong dtype, the loop not
            started), RunError.
        """
        if not isinstance(input_feed, Mapping):
            raise InvalidArgument("input_feed: expected a dict of input name -> array")
        names = self.input_names
        unknown = [k for k in input_feed if k not in names]
        if unknown:
            raise InvalidArgument(
                f"unknown step input(s) {', '.join(map(repr, unknown))} "
                f"(a step takes {', '.join(names)}; the caches stay in the loop)"
            )
        missing = [n for n in names if n not in input_feed]
        if missing:
            raise InvalidArgument(f"missing input(s): {', '.join(missing)}")
        feeds = [self._session._feed(k, input_feed[n]) for k, n in zip(self._feeds, names)]
        return [_array(raw) for raw in self._native.step(feeds)]

    def cache(self, name: str) -> np.ndarray:
        """The cache the next step reads for ``name`` (a past input's or a present
        output's name), as a copy."""
        for k, (past, present) in enumerate(self.cache_names):
            if name in (past, present):
                return _array(self._native.cache(k))
        raise InvalidArgument(
            f"no cache named {name!r} (the loop's: "
            f"{', '.join(p for pair in self.cache_names for p in pair)})"
        )

    def cache_length(self, name: str) -> Optional[int]:
        """How many rows the cache ``name`` holds along its growing axis."""
        for k, (past, present) in enumerate(self.cache_names):
            if name in (past, present):
                return self._native.cache_len(k)
        raise InvalidArgument(f"no cache named {name!r}")

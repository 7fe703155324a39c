"""Type stubs of ``graphrw._native``, the Rust extension behind the ``graphrw`` package.
Use the package's API (``graphrw.optimize``, ``graphrw.explain``,
``graphrw.InferenceSession``); this module's functions take and give plain values."""

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

__version__: str

_IoInfo = Tuple[str, str, str, List[str]]

def optimize(
    model: Union[str, bytes],
    output: Optional[str] = None,
    rules: List[str] = ...,
    layout: str = "keep",
    data_file: Optional[str] = None,
    want_bytes: bool = False,
    assume: List[str] = ...,
) -> Dict[str, Any]:
    """Optimises a model; the fields of ``graphrw.Report`` as a dict."""

def explain(model: Union[str, bytes], rule: str, node: Optional[str] = None) -> str:
    """``graphrw explain --rule``'s text."""

def coverage(model: Union[str, bytes]) -> Dict[str, Any]:
    """``graphrw explain MODEL``: ``{"sites": [dict], "text": str}``."""

def rules() -> List[Tuple[str, str, str]]:
    """``(rule, rule set, pass)`` of every built-in rule."""

_Feed = Tuple[str, Sequence[int], int, Any]
_Profile = Tuple[float, List[Tuple[str, float, int]]]

class Session:
    """A model loaded, optimised, planned and warmed up (graphrw.InferenceSession)."""

    def __init__(
        self,
        model: Union[str, bytes],
        level: str = "all",
        threads: int = 0,
        device: str = "cpu",
        optimized_model_path: Optional[str] = None,
        warmup: bool = True,
        dims: Dict[str, int] = ...,
        assume: List[str] = ...,
    ) -> None:
        """``level``: ``all``, ``none`` (no rewrite) or ``reference``; ``device``:
        ``cpu`` or ``cuda:N``; ``threads`` 0: ``GRAPHRW_THREADS``, else every core;
        ``dims``: symbolic dims' sizes in the warm-up run (1 where absent)."""
    def inputs(self) -> List[_IoInfo]:
        """``(name, numpy dtype, ort type, dims)`` per graph input."""
    def outputs(self) -> List[_IoInfo]:
        """``(name, numpy dtype, ort type, dims)`` per graph output."""
    def feed_dtypes(self) -> List[str]:
        """The numpy dtype each input is fed in (the input's own dtype)."""
    def optimized(self) -> str:
        """What the optimiser did."""
    def timings(self) -> Dict[str, float]:
        """Seconds: ``load``, ``optimize``, ``plan``, ``warmup``, ``total``."""
    def notes(self) -> List[Tuple[int, str]]:
        """``(severity, message)`` of the construction (0 verbose .. 3 error)."""
    def warmup_error(self) -> Optional[str]:
        """Why the warm-up run failed, if it did."""
    def device(self) -> str:
        """``cpu`` or ``cuda:N``."""
    def threads(self) -> Optional[int]:
        """Threads for the plan's kernels (None: every core)."""
    def run(
        self, feeds: List[_Feed], profile: bool = False
    ) -> Tuple[List[Array], Optional[_Profile]]:
        """Runs on ``(numpy dtype, shape, address, array)`` per input (C-contiguous,
        read in place); every output as an ``Array`` over its own buffer, and with
        ``profile`` ``(seconds, [(op, seconds, calls)])``."""
    def run_kept(
        self, feeds: List[_Feed], profile: bool = False
    ) -> Tuple[Outputs, Optional[_Profile]]:
        """``run``, the outputs kept in graphrw's memory."""
    def feed_addresses(self, feeds: List[_Feed]) -> List[int]:
        """Where a run reads each fed value (the array's own address when in place)."""
    def decode_loop(self) -> Loop:
        """A generation loop over the plan (pairs of ``present*`` / ``past*`` by name)."""

class Loop:
    """A generation loop: presents fed back as pasts, caches growing in place."""

    def pairs(self) -> List[Tuple[int, int, Optional[int]]]:
        """``(input index, output index, cache axis or None)`` per pair."""
    def start(self, caches: List[_Feed]) -> None:
        """(Re)starts from one cache per pair (copied)."""
    def step(self, feeds: List[_Feed]) -> List[Array]:
        """One step on the inputs that are not caches; the outputs that are not."""
    def cache(self, k: int) -> Array:
        """Pair ``k``'s cache (a copy)."""
    def cache_len(self, k: int) -> Optional[int]:
        """Pair ``k``'s cache length."""

class Outputs:
    """A run's outputs held in graphrw's memory, back to the session's pool when freed."""

    def __len__(self) -> int: ...
    def info(self, k: int) -> Tuple[str, List[int]]:
        """Output ``k``'s numpy dtype and shape."""
    def array(self, k: int) -> Array:
        """Output ``k`` as a read-only ``Array`` over graphrw's buffer."""

class Array:
    """A tensor's memory for ``numpy.asarray`` (no copy): an output handed over
    (writable), or a value graphrw keeps (read-only)."""

    __array_interface__: Dict[str, Any]
    dtype: str

def model_meta(model: Union[str, bytes]) -> Dict[str, Any]:
    """The model's metadata fields (``version`` None where unset)."""

def has_cuda() -> bool:
    """Whether this build runs plans on CUDA devices."""

def cli_main(argv: List[str]) -> int: ...

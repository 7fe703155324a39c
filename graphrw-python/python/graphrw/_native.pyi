"""Type stubs of ``graphrw._native``, the Rust extension behind the ``graphrw`` package.
Use the package's API (``graphrw.optimize``, ``graphrw.explain``,
``graphrw.InferenceSession``); this module's functions take and give plain values."""

from typing import Any, Dict, List, Optional, Tuple, Union

__version__: str

_IoInfo = Tuple[str, str, str, List[str]]

def optimize(
    model: Union[str, bytes],
    output: Optional[str] = None,
    rules: List[str] = ...,
    layout: str = "keep",
    data_file: Optional[str] = None,
    want_bytes: bool = False,
) -> Dict[str, Any]:
    """Optimises a model; the fields of ``graphrw.Report`` as a dict."""

def explain(model: Union[str, bytes], rule: str, node: Optional[str] = None) -> str:
    """``graphrw explain``'s text."""

class Session:
    """A model planned on graphrw's default (or reference) stack."""

    def __init__(self, model: Union[str, bytes], optimize: bool = True) -> None: ...
    def inputs(self) -> List[_IoInfo]:
        """``(name, numpy dtype, ort type, dims)`` per graph input."""
    def outputs(self) -> List[_IoInfo]:
        """``(name, numpy dtype, ort type, dims)`` per graph output."""
    def optimized(self) -> str:
        """What the optimiser did."""
    def run(self, feeds: List[Tuple[str, List[int], bytes]]) -> List[Tuple[str, List[int], bytearray]]:
        """Runs on ``(numpy dtype, shape, bytes)`` per input; every output likewise."""

def cli_inspect(model: str) -> int: ...
def cli_explain(model: str, rule: str, node: Optional[str] = None) -> int: ...
def cli_optimize(
    model: str, output: str, rules: List[str], layout: str = "keep", data_file: Optional[str] = None
) -> int: ...
def cli_run(
    model_dir: str,
    model: Optional[str] = None,
    executors: str = "default",
    repeat: int = 1,
    compare: bool = False,
    profile: bool = False,
) -> int: ...

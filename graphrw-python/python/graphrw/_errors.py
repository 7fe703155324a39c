"""The exceptions graphrw raises. Each carries the one-line message the ``graphrw``
command would print after ``error:``."""

__all__ = [
    "GraphrwError",
    "LoadError",
    "OptimizeError",
    "SaveError",
    "RunError",
    "InvalidArgument",
]


class GraphrwError(Exception):
    """Base class of every graphrw error (also raised, alone, for an internal error)."""


class LoadError(GraphrwError):
    """The model could not be read: a missing file, corrupt bytes, an unsupported op."""


class OptimizeError(GraphrwError):
    """A rewrite pass failed (a replacement that fails is rolled back and listed in
    ``Report.skipped`` instead)."""


class SaveError(GraphrwError):
    """The optimised model could not be written (I/O, protobuf's 2 GiB limit)."""


class RunError(GraphrwError):
    """Planning or running the model failed."""


class InvalidArgument(GraphrwError, ValueError):
    """An argument is wrong: an unknown rule, node or input name, a missing feed, an
    array whose dtype or shape does not fit the model's input. Also a ``ValueError``."""

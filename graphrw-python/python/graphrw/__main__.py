"""The ``graphrw`` command: the console script the wheel installs, and ``python -m graphrw``.

Runs graphrw-cli's own argument parser and subcommands (compiled into the extension), so
every subcommand (``ops``, ``inspect``, ``print``, ``dot``, ``explain``, ``optimize``,
``run``), ``--help`` and ``--version`` behave and print as the Rust binary's do, with
its exit codes: 0 on success, 1 on an error (printed as one ``error: ...`` line on
stderr) or when ``run`` finds an output beyond tolerance, 2 on bad arguments.
"""

from __future__ import annotations

import sys
from typing import List, Optional

from . import _native


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the command on ``argv`` (``sys.argv[1:]`` by default); returns its exit code."""
    args = sys.argv[1:] if argv is None else list(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    return _native.cli_main(["graphrw", *args])


def console() -> None:
    """The ``graphrw`` console script: runs :func:`main` and exits with its code."""
    sys.exit(main())


if __name__ == "__main__":
    console()

"""``python -m graphrw``: the ``graphrw`` command's optimize, inspect, run and explain.

Runs graphrw-cli's own subcommand code (compiled into the extension), so the output
and the exit codes are the command's: 0 on success, 1 on an error (printed as one
``error: ...`` line on stderr) or when ``run`` finds an output beyond tolerance.
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from . import _native
from ._errors import GraphrwError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m graphrw",
        description="Rewrite and run machine-learning computation graphs "
        "(the graphrw command's optimize, inspect, run and explain).",
    )
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("inspect", help="Summarise a model: ops with counts, inputs and outputs.")
    s.add_argument("model", help="The ONNX model file (external data is read from its folder).")

    s = sub.add_parser("explain", help="Explain why a built-in rule matches or not.")
    s.add_argument("model", help="The ONNX model file.")
    s.add_argument("--rule", required=True, metavar="NAME", help="The rule's name.")
    s.add_argument("--node", metavar="N", help="The node: its printed name (t41) or its ONNX name.")

    s = sub.add_parser(
        "optimize", help="Apply rule sets (by default: attention fusion) and write the result as ONNX."
    )
    s.add_argument("model", help="The ONNX model file.")
    s.add_argument("-o", "--output", required=True, metavar="OUT", help="Where to write the optimised model.")
    s.add_argument(
        "--rules",
        action="append",
        default=[],
        metavar="NAME",
        help="Rule sets to apply: all (the default), canonical, attention, kernels or one kernel. Repeatable.",
    )
    layout = s.add_mutually_exclusive_group()
    layout.add_argument("--single-file", action="store_true", help="Write every weight inline in OUT.")
    layout.add_argument(
        "--external-data", action="store_true", help="Write every weight of 1 KiB or more to OUT.data."
    )
    s.add_argument("--data-file", metavar="NAME", help="The external data file's name, in OUT's folder.")

    s = sub.add_parser("run", help="Run a model on its ONNX test data and report the max error and time.")
    s.add_argument("model_dir", help="A folder holding model.onnx and test_data_set_*/.")
    s.add_argument("--model", metavar="FILE", help="Run this model file instead of MODEL_DIR/model.onnx.")
    s.add_argument("--executors", choices=["default", "reference"], default="default")
    s.add_argument("--repeat", type=int, default=1, metavar="N", help="Timed runs per test data set.")
    s.add_argument("--compare", action="store_true", help="Also run the other stack and compare.")
    s.add_argument("--profile", action="store_true", help="Print where the best run's time went.")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    """Runs one subcommand; returns its exit code."""
    args = _parser().parse_args(argv)
    sys.stdout.flush()
    try:
        if args.command == "inspect":
            return _native.cli_inspect(args.model)
        if args.command == "explain":
            return _native.cli_explain(args.model, args.rule, args.node)
        if args.command == "optimize":
            layout = "single" if args.single_file else "external" if args.external_data else "keep"
            return _native.cli_optimize(args.model, args.output, args.rules, layout, args.data_file)
        if args.repeat < 1:
            raise GraphrwError("--repeat: expected a number of at least 1")
        return _native.cli_run(
            args.model_dir, args.model, args.executors, args.repeat, args.compare, args.profile
        )
    except GraphrwError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""Runs two ONNX models in onnxruntime on the inputs of an .npz and compares them.

    python compare.py ORIGINAL.onnx OPTIMISED.onnx INPUTS.npz [--nan-rows-to-zero]

Exit code 0 when every output of OPTIMISED is within 1e-4 + 1e-3 * max|y| of
ORIGINAL's, 1 when not, 2 when onnxruntime cannot run a model. With
`--nan-rows-to-zero`, NaN entries of ORIGINAL must be exactly 0 in OPTIMISED (the
fused attention's semantics for a query row with no visible key) and at least one
NaN must be present. Prints one line per output.
"""

import sys

import numpy as np
import onnxruntime as ort


def run(path, feeds):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    return sess.run(None, {n: feeds[n] for n in names})


def main():
    orig, opt, npz = sys.argv[1:4]
    nan_rows = "--nan-rows-to-zero" in sys.argv[4:]
    feeds = dict(np.load(npz))
    try:
        want = run(orig, feeds)
        got = run(opt, feeds)
    except Exception as e:  # noqa: BLE001 - report any onnxruntime failure
        print(f"onnxruntime failed: {e}".splitlines()[0])
        return 2
    ok = True
    for i, (w, g) in enumerate(zip(want, got)):
        w = w.astype(np.float64)
        g = g.astype(np.float64)
        if w.shape != g.shape:
            print(f"output {i}: shape {g.shape}, expected {w.shape}")
            ok = False
            continue
        nan = np.isnan(w)
        if nan_rows:
            if not nan.any() or np.any(g[nan] != 0.0):
                print(f"output {i}: NaN rows {int(nan.sum())} not all zero in the optimised model")
                ok = False
        elif nan.any():
            print(f"output {i}: the original model gives NaN")
            ok = False
        fin = ~nan
        scale = np.max(np.abs(w[fin])) if fin.any() else 0.0
        tol = 1e-4 + 1e-3 * scale
        err = np.max(np.abs(w[fin] - g[fin])) if fin.any() else 0.0
        print(f"output {i}: max abs error {err:.3e} (tolerance {tol:.3e})")
        ok &= bool(err <= tol) and not np.isnan(g[fin]).any()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

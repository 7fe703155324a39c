"""Writes the models of `graphrw/tests/onnxscript_outputs.rs`: onnxscript's
`optimize_for_ort` applied to small exports of the shared corpus.

    python gen.py ../../../../../shared    # needs onnx and onnxscript (not torch)
"""
import os
import sys

import onnx
import onnxscript
from onnxscript.rewriter import ort_fusions

SOURCES = {
    "electra_dynamo": "corpus_dynamic/electra_dynamo",
    "falcon_dynamo": "corpus_dynamic/falcon_dynamo",
    "gpt_neox_torchscript": "corpus_dynamic/gpt_neox_torchscript",
    "llama_eager": "corpus/llama_eager",
}

shared = sys.argv[1]
here = os.path.dirname(os.path.abspath(__file__))
for name, src in SOURCES.items():
    model = onnxscript.ir.serde.deserialize_model(onnx.load(os.path.join(shared, src, "model.onnx")))
    fused, counts = ort_fusions.optimize_for_ort(model)
    onnx.save(onnxscript.ir.serde.serialize_model(fused), os.path.join(here, name + ".onnx"))
    print(name, {k: v for k, v in counts.items() if v})

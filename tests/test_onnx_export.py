"""The ONNX demo at the tiny size: a checker-valid file with a symbolic batch, ONNX Runtime equal
to PyTorch at two batch sizes, and another sequence length refused."""

from __future__ import annotations

import pytest
from conftest import demo_record

pytestmark = pytest.mark.slow


tiny_record = demo_record("demos.t2_pipeline.onnx_export")


def test_onnx_runtime_matches_pytorch_at_two_batch_sizes(tiny_record):
    checks = {c["name"]: c for c in tiny_record["checks"]}
    for batch in (1, 3):
        parity = checks[f"ort_cpu.batch{batch}.vs_pytorch"]
        assert parity["max_abs_err"] <= parity["atol"], parity
        assert tiny_record["metrics"][f"parity.batch{batch}.max_abs_diff"]["value"] < 1e-4
    assert "onnx.checker" in checks
    # tiny: sequence 16, width 32, fixed; the batch a symbol
    assert checks["onnx.batch_is_symbolic"]["detail"].startswith("input dims ['batch', 16, 32]")
    assert "INVALID_ARGUMENT" in checks["ort.rejects_other_sequence_length"]["detail"]  # refused before running


def test_node_summary_and_graph_text(tiny_record):
    rows = {r[0]: r for r in next(t for t in tiny_record["tables"] if t["name"] == "node_types")["rows"]}
    assert rows["MatMul"][1] > 0 and rows["LayerNormalization"][1] == 2
    assert sum(r[1] for r in rows.values()) == tiny_record["metrics"]["onnx.nodes"]["value"]
    assert "LayerNormalization" in tiny_record["artifacts"]["onnx_graph"]


def test_parity_check_can_fail():
    """The comparison is real: ONNX Runtime on a file exported from different weights disagrees."""
    import warnings

    import onnxruntime as ort
    import torch

    from demos.common.block import make_block

    a, b = make_block(32, 2, "cpu", seed=0), make_block(32, 2, "cpu", seed=1)
    x = torch.randn(1, 16, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(b, (x,), dynamo=True, verbose=False)
    sess = ort.InferenceSession(program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    out = torch.from_numpy(sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0])
    with torch.no_grad():
        assert not torch.allclose(out, a(x), rtol=1e-4, atol=1e-4)
        assert torch.allclose(out, b(x), rtol=1e-4, atol=1e-4)

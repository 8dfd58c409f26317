"""GPU names map to device classes (harness/device.py), and every named class has a datasheet entry."""

from __future__ import annotations

import re
import tomllib

import pytest

from records.devices import GPU_CLASSES, gpu_class
from records.paths import DATASHEETS

NAMES = {  # what the CUDA driver reports -> the class a record gets
    "NVIDIA H100 80GB HBM3": "h100",
    "NVIDIA H100 PCIe": "h100-pcie",
    "NVIDIA H100 NVL": "h100-nvl",
    "NVIDIA H200": "h200",
    "NVIDIA H200 NVL": "h200-nvl",
    "NVIDIA GH200 480GB": "gh200",  # a Grace Hopper superchip's GPU: not an H200
    "NVIDIA GH200 144G HBM3e": "gh200",
    "NVIDIA A100-SXM4-80GB": "a100",
    "NVIDIA A100 80GB PCIe": "a100",
    "NVIDIA L4": "l4",
    "NVIDIA L40S": "l40s",
    "NVIDIA L40": "nvidia-l40",  # no named class: its own
    "Tesla T4": "tesla-t4",
}


@pytest.mark.parametrize("name,expected", NAMES.items())
def test_gpu_names_map_to_their_class(name, expected):
    assert gpu_class(name) == expected


def test_an_unknown_gpu_gets_a_class_of_its_own_that_the_schema_accepts():
    for name in ("NVIDIA RTX PRO 6000 Blackwell Server Edition with a very long marketing name", "GPU", "!!!", "CPU"):
        cls = gpu_class(name)
        assert re.fullmatch(r"[a-z0-9][a-z0-9-]{0,39}", cls), cls
        assert cls not in {c for c, _ in GPU_CLASSES} and cls != "cpu"


def test_every_named_class_has_a_cited_datasheet_with_dense_peaks():
    sheets = tomllib.loads(DATASHEETS.read_text(encoding="utf-8"))
    for cls, _ in GPU_CLASSES:
        sheet = sheets[cls]
        assert sheet["kind"] == "cuda" and sheet["memory_gbps"] > 0
        assert "https://" in sheet["source"], cls
        tflops = sheet["tflops"]
        assert tflops["bfloat16"] > tflops["float32"] > 0
        assert tflops.get("float8", 2 * tflops["bfloat16"]) == pytest.approx(2 * tflops["bfloat16"], rel=0.02), \
            f"{cls}: dense fp8 is twice dense bf16 on these parts"
    assert sheets["gh200"]["memory_gbps"] != sheets["h200"]["memory_gbps"]
    assert sheets["h100-nvl"]["tflops"]["bfloat16"] < sheets["h100"]["tflops"]["bfloat16"]

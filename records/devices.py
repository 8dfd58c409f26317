"""Device classes: the one place that names them.

A record belongs to a device class ("cpu", "h100", "h200", ...): the name of its file under
docs/results/<demo>/, the key of its datasheet entry (records/datasheets.toml) and of its tab on a page.
Everything that maps a GPU's name to its class, or decides whether a string is a class, asks here.
Nothing here imports torch: the harness asks the driver for the GPU's name and passes it to ``gpu_class``.
"""

from __future__ import annotations

import json
import re

from records.paths import RECORD_SCHEMA

CPU = "cpu"

# What a class may look like: the record schema's pattern (one source; lower-case letters, digits, '-').
CLASS_PATTERN = json.loads(RECORD_SCHEMA.read_text(encoding="utf-8"))["$defs"]["device_class"]["pattern"]
_CLASS = re.compile(CLASS_PATTERN)

# Device classes are matched on the name the CUDA driver reports; first match wins. The datasheet
# figures for each named class live in records/datasheets.toml. The order matters: the PCIe and NVL
# cards of a chip come before its SXM part (their names also contain "H100"), and "GH200" (the Hopper
# GPU of a Grace Hopper superchip, with its own memory) comes before "H200", which it must not match.
# Names as the driver reports them: "NVIDIA H100 80GB HBM3" (SXM), "NVIDIA H100 PCIe", "NVIDIA H100 NVL",
# "NVIDIA H200", "NVIDIA H200 NVL", "NVIDIA GH200 480GB", "NVIDIA A100-SXM4-80GB", "NVIDIA L4", "NVIDIA L40S".
GPU_CLASSES = [
    ("gh200", r"\bGH200\b"),
    ("h100-pcie", r"\bH100\b.*\bPCIe\b"),
    ("h100-nvl", r"\bH100\b.*\bNVL\b"),
    ("h100", r"\bH100\b"),
    ("h200-nvl", r"\bH200\b.*\bNVL\b"),
    ("h200", r"\bH200\b"),
    ("a100", r"\bA100\b"),
    ("l40s", r"\bL40S\b"),
    ("l4", r"\bL4\b"),
]


def is_class(text: str) -> bool:
    """Whether text has the shape of a device class (declared or not)."""
    return bool(_CLASS.match(text))


def is_gpu_class(device_class: str) -> bool:
    return device_class != CPU


def gpu_class(name: str) -> str:
    """Map a CUDA device name to a device class: 'NVIDIA H100 80GB HBM3' -> 'h100'.

    A GPU of no named class gets its own class, a slug of its name ('NVIDIA L40' -> 'nvidia-l40'),
    never a neighbour's: its records then stand apart, with no datasheet until one is added."""
    for cls, pattern in GPU_CLASSES:
        if re.search(pattern, name, flags=re.IGNORECASE):
            return cls
    # at most 40 characters, the record schema's bound for a class (with room for a "gpu-" prefix)
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:36].strip("-")
    if slug in {CPU, *(cls for cls, _ in GPU_CLASSES)}:  # never a named class by accident
        slug = f"gpu-{slug}"
    return slug or "cuda-unknown"

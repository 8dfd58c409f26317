"""The shared measurement harness. Every demo uses it; no demo times anything by hand.

One module, one job:

- ``cli``        command-line options of every demo, one-line errors for bad input (exit 2)
- ``device``     device selection (auto|cpu|cuda), device class, synchronisation, L2 flush
- ``timing``     the timing protocol and its version: first call, warm-up, repeats, median and spread
- ``ceilings``   what this machine can do, measured in the same run (copy bandwidth, matmul)
- ``threads``    the CPU thread policy (PyTorch, BLAS, XLA, ONNX Runtime sessions)
- ``provenance`` versions, machine, git state: where a number came from
- ``run``        ``start()``: ties the above together for a demo, and writes its record

The record itself (schema, digest, freshness, atomic write) belongs to the record core, ``records/``,
which the harness writes through. This package file imports nothing heavy on purpose.
"""

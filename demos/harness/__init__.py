"""The shared measurement harness. Every demo uses it; no demo times anything by hand.

One module, one job:

- ``cli``        command-line options of every demo, one-line errors for bad input (exit 2)
- ``device``     device selection (auto|cpu|cuda), device class, synchronisation, L2 flush
- ``timing``     the timing protocol: first call, warm-up, repeats, median and spread
- ``ceilings``   what this machine can do, measured in the same run (copy bandwidth, matmul)
- ``provenance`` versions, machine, git state: where a number came from
- ``digest``     the source digest that decides whether a record is fresh
- ``record``     the result record: schema, validation, atomic write
- ``run``        ``start()``: ties the above together for a demo

This package file imports nothing heavy on purpose: the check command reads records and digests
without importing torch.
"""

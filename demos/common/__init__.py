"""Helpers that more than one topic uses (a model block, the cluster cost model): neutral ground."""

"""Evaluation backends: the contract, and the Ray pool (the only Ray importer)."""

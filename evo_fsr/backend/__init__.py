"""Evaluation backends: the contract (base.py), in-process (inline.py), and the Ray pool
(ray_pool.py, the only module that imports Ray)."""

"""``evo-fsr export``: a kernel as a small standalone Python package callable on torch tensors
and CuPy arrays (builder.py writes it; runtime.py is copied into it)."""

"""``evo-fsr import-kernelbench``: KernelBench problem files -> evo-fsr task folders.

problem.py reads a problem file without running it (AST: the Model, its forward, in-place
and several-output returns, non-float inputs, the operation for a naive seed); probe.py runs
it with torch to learn shapes, dims and output formulas; naive.py writes the naive seed (or a
labelled placeholder); writer.py writes task.yaml, reference.py, problem.py and seeds/.
"""

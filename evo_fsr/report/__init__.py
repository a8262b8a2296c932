"""``evo-fsr report``: one self-contained HTML page on a run directory (data.py reads the run,
plots.py draws the figures, page.py writes the HTML)."""

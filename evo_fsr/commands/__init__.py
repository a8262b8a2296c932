"""Command-line subcommands; evo_fsr/cli.py dispatches to them. Only these read argv."""

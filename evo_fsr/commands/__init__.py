"""Command-line subcommands (``evo-fsr <command>``); each module exposes ``main(argv) -> int``."""

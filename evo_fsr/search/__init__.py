"""The evolutionary search: loop, population, selection, run store."""

"""The untrusted process that loads candidate code, and the walls around it."""

"""The trusted side: where a verdict is reached (compile, validate, profile)."""

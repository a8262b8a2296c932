"""Fakes for tests: a synthetic evaluator and a local OpenAI-compatible chat server."""

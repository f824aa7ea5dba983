"""Runnable examples (``python -m compiler.examples.<name>``)."""

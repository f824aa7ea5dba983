"""Kernel templates in portable C: every C target's fallback (``generic``), typed and quantized forms."""

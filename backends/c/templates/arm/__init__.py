"""Kernel templates for ARM NEON (NCHW44, dot product, i8mm, FP16)."""

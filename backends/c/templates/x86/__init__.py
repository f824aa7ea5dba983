"""Kernel templates for x86 ISAs (SSE/AVX2/AVX-512 and its extensions, AMX) and the x86 ISA table."""

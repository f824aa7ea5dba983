"""The names of MegEngine's C++ runtime module that Python code calls (``core2.apply``)."""

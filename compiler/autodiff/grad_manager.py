"""MegEngine's ``megengine.autodiff.grad_manager`` (``GradManager`` is defined in the package)."""

from compiler.autodiff import GradManager

__all__ = ["GradManager"]

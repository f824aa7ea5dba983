"""MegEngine's ``megengine.core.autodiff``: the low-level :class:`~compiler.core.autodiff.grad.Grad`."""

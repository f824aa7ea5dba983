"""MegEngine's ``optimizer.multi_step_lr`` (defined in :mod:`compiler.optimizer.lr_scheduler`)."""

from compiler.optimizer.lr_scheduler import MultiStepLR

__all__ = ["MultiStepLR"]

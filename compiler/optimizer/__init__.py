"""MegEngine 1.13's ``optimizer`` API: SGD, Adam, AdamW over ``Parameter.grad``."""

from compiler.optimizer.adam import Adam
from compiler.optimizer.adamw import AdamW
from compiler.optimizer.optimizer import Optimizer
from compiler.optimizer.sgd import SGD

__all__ = ["SGD", "Adam", "AdamW", "Optimizer"]

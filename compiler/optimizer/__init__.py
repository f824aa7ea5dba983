"""MegEngine 1.13's ``optimizer`` API: SGD, Adam, AdamW, Adagrad, Adadelta, LAMB over
``Parameter.grad``."""

from compiler.optimizer.adadelta import Adadelta
from compiler.optimizer.adagrad import Adagrad
from compiler.optimizer.adam import Adam
from compiler.optimizer.adamw import AdamW
from compiler.optimizer.clip_grad import clip_grad_norm, clip_grad_value
from compiler.optimizer.lamb import LAMB
from compiler.optimizer.lr_scheduler import LRScheduler, MultiStepLR
from compiler.optimizer.optimizer import Optimizer
from compiler.optimizer.sgd import SGD

__all__ = [
    "LAMB",
    "SGD",
    "Adadelta",
    "Adagrad",
    "Adam",
    "AdamW",
    "LRScheduler",
    "MultiStepLR",
    "Optimizer",
    "clip_grad_norm",
    "clip_grad_value",
]

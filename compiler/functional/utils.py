"""MegEngine's ``functional.utils``: where ``topk_accuracy`` is also exported."""

from compiler.functional.metric import topk_accuracy

__all__ = ["topk_accuracy"]

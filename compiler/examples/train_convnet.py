"""Train the seed ConvNet on a synthetic, deterministic classification set, with checkpoints.

    python -m compiler.examples.train_convnet --optimizer sgd --epochs 6 --checkpoint-dir ckpt
    python -m compiler.examples.train_convnet --optimizer sgd --epochs 6 --resume ckpt/checkpoint.pkl

A checkpoint is MegEngine's save/load-guide layout, ``{"epoch", "state_dict", "opt", "loss"}``,
written atomically after every epoch (``checkpoint.pkl``; ``best.pkl`` when the epoch's loss is the
lowest so far). Everything a run depends on is a function of ``--seed`` and the epoch number (the
data, the initial weights, each epoch's batch order), and the model and optimizer state are saved
exactly (float32 arrays), so resuming from epoch k in a new process continues with bit-identical
losses. ``--stop-after K`` ends a run after epoch K, as an interruption would.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

import compiler as xm
import compiler.functional as F
from compiler.autodiff import GradManager
from compiler.hub.convnet import ConvNet
from compiler.optimizer import SGD, Adam, AdamW, Optimizer

NUM_CLASSES = 10


def make_dataset(num_samples: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``num_samples`` 1x28x28 images: one smooth random template per class, scaled, shifted by up
    to two pixels and buried in noise, so the classes overlap enough that learning takes a while."""
    rng = np.random.default_rng(seed)
    coarse = rng.standard_normal((NUM_CLASSES, 7, 7)).astype(np.float32)
    templates = np.kron(coarse, np.ones((4, 4), np.float32))  # 10 x 28 x 28, blocky patterns
    labels = rng.permutation(np.arange(num_samples) % NUM_CLASSES).astype(np.int32)
    images = np.empty((num_samples, 1, 28, 28), np.float32)
    for i, c in enumerate(labels):
        dy, dx = rng.integers(-2, 3, size=2)
        shifted = np.roll(templates[c], (int(dy), int(dx)), axis=(0, 1))
        images[i, 0] = rng.uniform(0.5, 1.5) * shifted + rng.standard_normal((28, 28)).astype(np.float32)
    return images, labels


def init_parameters(model: xm.module.Module, seed: int) -> None:
    """Uniform(+-1/sqrt(fan_in)) weights and zero biases from ``seed`` alone: the layers' own
    initialiser draws from a process-wide generator, which would make runs depend on history."""
    rng = np.random.default_rng(seed)
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            p._reset(np.zeros(p.shape, np.float32))
        else:
            fan_in = math.prod(p.shape[1:]) if p.ndim > 1 else p.shape[0]
            bound = 1.0 / math.sqrt(fan_in)
            p._reset(rng.uniform(-bound, bound, size=p.shape).astype(np.float32))


def make_optimizer(name: str, params: Any) -> Optimizer:
    if name == "sgd":
        return SGD(params, lr=0.005, momentum=0.9, weight_decay=1e-4)
    if name == "adam":
        return Adam(params, lr=1e-3)
    if name == "adamw":
        return AdamW(params, lr=1e-3, weight_decay=1e-2)
    raise ValueError(f"unknown optimizer {name!r}; expected sgd, adam or adamw")


def batch_order(num_samples: int, seed: int, epoch: int) -> np.ndarray:
    # a fresh generator per epoch: resuming at any epoch needs no saved RNG state
    return np.random.default_rng([seed, epoch]).permutation(num_samples)


def train(
    *,
    optimizer: str = "sgd",
    epochs: int = 4,
    num_samples: int = 256,
    val_samples: int = 0,
    batch_size: int = 32,
    seed: int = 0,
    checkpoint_dir: str | None = None,
    resume: str | None = None,
    stop_after: int | None = None,
    log: Any = None,
) -> dict[str, Any]:
    """Train on ``num_samples`` images (``val_samples`` more are held out); returns the float32
    losses of the steps and epochs this call ran, the first epoch it ran, training and held-out
    accuracy, and the model."""
    all_images, all_labels = make_dataset(num_samples + val_samples, seed)
    images, labels = all_images[:num_samples], all_labels[:num_samples]
    model = ConvNet()
    init_parameters(model, seed)
    model.train()
    opt = make_optimizer(optimizer, model.parameters())
    gm = GradManager().attach(model.parameters())
    start_epoch, best = 0, math.inf
    if resume is not None:
        ckpt = xm.load(resume)  # the restricted loader: a checkpoint is only arrays and containers
        model.load_state_dict(ckpt["state_dict"])
        opt.load_state_dict(ckpt["opt"])
        start_epoch, best = int(ckpt["epoch"]), float(ckpt.get("best_loss", ckpt["loss"]))
    step_losses: list[np.float32] = []
    epoch_losses: list[np.float32] = []
    last = epochs if stop_after is None else min(epochs, stop_after)
    for epoch in range(start_epoch, last):
        order = batch_order(num_samples, seed, epoch)
        losses = []
        for start in range(0, num_samples, batch_size):
            idx = order[start : start + batch_size]
            x, y = xm.tensor(images[idx]), xm.tensor(labels[idx])
            with gm:
                loss = F.nn.cross_entropy(model(x), y)
                gm.backward(loss)
            opt.step().clear_grad()
            losses.append(np.float32(loss.item()))
        mean_loss = np.float32(np.mean(np.asarray(losses, np.float32)))
        step_losses.extend(losses)
        epoch_losses.append(mean_loss)
        if log is not None:
            print(f"epoch {epoch + 1}/{epochs}  loss {float(mean_loss):.4f}", file=log, flush=True)
        if checkpoint_dir is not None:
            best = min(best, float(mean_loss))
            ckpt = {
                "epoch": epoch + 1,
                "state_dict": model.state_dict(),
                "opt": opt.state_dict(),
                "loss": float(mean_loss),
                "best_loss": best,
            }
            os.makedirs(checkpoint_dir, exist_ok=True)
            xm.save(ckpt, os.path.join(checkpoint_dir, "checkpoint.pkl"))
            if float(mean_loss) == best:
                xm.save(ckpt, os.path.join(checkpoint_dir, "best.pkl"))
    model.eval()
    logits = model(xm.tensor(all_images)).numpy()
    hit = logits.argmax(axis=1) == all_labels
    accuracy = float(hit[:num_samples].mean())
    val_accuracy = float(hit[num_samples:].mean()) if val_samples else math.nan
    return {
        "step_losses": step_losses,
        "epoch_losses": epoch_losses,
        "start_epoch": start_epoch,
        "accuracy": accuracy,
        "val_accuracy": val_accuracy,
        "model": model,
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--optimizer", choices=["sgd", "adam", "adamw"], default="sgd")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--samples", type=int, default=512, help="size of the synthetic training set")
    ap.add_argument("--val-samples", type=int, default=256, help="held-out images for the accuracy")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--checkpoint-dir", help="save checkpoint.pkl (and best.pkl) here after every epoch")
    ap.add_argument("--resume", help="continue from this checkpoint")
    ap.add_argument("--stop-after", type=int, help="stop after this epoch, as if interrupted")
    ap.add_argument("--json", action="store_true", help="print the losses (exact float32, hex) as JSON")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    result = train(
        optimizer=args.optimizer,
        epochs=args.epochs,
        num_samples=args.samples,
        val_samples=args.val_samples,
        batch_size=args.batch_size,
        seed=args.seed,
        checkpoint_dir=args.checkpoint_dir,
        resume=args.resume,
        stop_after=args.stop_after,
        log=sys.stderr if args.json else sys.stdout,
    )
    elapsed = time.perf_counter() - t0
    if args.json:
        print(
            json.dumps(
                {
                    "start_epoch": result["start_epoch"],
                    "step_losses": [float(v).hex() for v in result["step_losses"]],
                    "epoch_losses": [float(v).hex() for v in result["epoch_losses"]],
                    "accuracy": result["accuracy"],
                    "val_accuracy": result["val_accuracy"],
                    "seconds": elapsed,
                }
            )
        )
    else:
        print(
            f"accuracy: training set {result['accuracy']:.3f}, held out {result['val_accuracy']:.3f}"
            f"  ({elapsed:.1f} s)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

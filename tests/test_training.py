"""End to end: the seed ConvNet trains, and a checkpoint resumed in a new process continues with
bit-identical float32 losses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import compiler as xm
from compiler.examples.train_convnet import make_dataset, train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = {"num_samples": 64, "batch_size": 16, "epochs": 3}


def _hex(values: list[np.float32]) -> list[str]:
    return [float(v).hex() for v in values]


def _resume_in_new_process(checkpoint: str, optimizer: str) -> dict[str, Any]:
    cmd = [
        sys.executable, "-m", "compiler.examples.train_convnet", "--json", "--optimizer", optimizer,
        "--samples", str(SMALL["num_samples"]), "--val-samples", "0",
        "--batch-size", str(SMALL["batch_size"]), "--epochs", str(SMALL["epochs"]), "--resume", checkpoint,
    ]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_resume_in_a_new_process_continues_bit_identically(tmp_path: Any, optimizer: str) -> None:
    full = train(optimizer=optimizer, **SMALL)
    first = train(optimizer=optimizer, checkpoint_dir=str(tmp_path), stop_after=1, **SMALL)
    steps_per_epoch = SMALL["num_samples"] // SMALL["batch_size"]
    assert _hex(first["step_losses"]) == _hex(full["step_losses"][:steps_per_epoch])

    ckpt = xm.load(tmp_path / "checkpoint.pkl")
    assert ckpt["epoch"] == 1 and set(ckpt) >= {"epoch", "state_dict", "opt", "loss"}
    assert set(ckpt["opt"]) == {"param_groups", "state"}

    resumed = _resume_in_new_process(str(tmp_path / "checkpoint.pkl"), optimizer)
    assert resumed["start_epoch"] == 1
    assert resumed["step_losses"] == _hex(full["step_losses"][steps_per_epoch:])
    assert resumed["epoch_losses"] == _hex(full["epoch_losses"][1:])
    # the comparison has teeth: the losses after the checkpoint are not all alike
    assert len(set(resumed["step_losses"])) == len(resumed["step_losses"])


def test_checkpoints_are_written_every_epoch_and_the_best_is_kept(tmp_path: Any) -> None:
    result = train(optimizer="adam", checkpoint_dir=str(tmp_path), num_samples=32, batch_size=16, epochs=2)
    ckpt = xm.load(tmp_path / "checkpoint.pkl")
    best = xm.load(tmp_path / "best.pkl")
    assert ckpt["epoch"] == 2 and ckpt["loss"] == float(result["epoch_losses"][-1])
    assert best["loss"] == min(float(v) for v in result["epoch_losses"])
    assert sorted(os.listdir(tmp_path)) == ["best.pkl", "checkpoint.pkl"]


def test_dataset_is_deterministic() -> None:
    a, la = make_dataset(40, seed=3)
    b, lb = make_dataset(40, seed=3)
    assert np.array_equal(a, b) and np.array_equal(la, lb)
    assert sorted(np.bincount(la)) == [4] * 10


def test_loss_falls_clearly() -> None:
    result = train(optimizer="adam", num_samples=256, batch_size=32, epochs=5)
    first, last = float(result["epoch_losses"][0]), float(result["epoch_losses"][-1])
    assert first > 2.0  # about ln(10) for an untrained 10-class model
    assert last < 0.5 * first, result["epoch_losses"]


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw"])
def test_full_training_run_generalises(optimizer: str) -> None:
    result = train(optimizer=optimizer, num_samples=512, val_samples=256, epochs=6)
    assert float(result["epoch_losses"][-1]) < 0.1
    assert result["val_accuracy"] > 0.95

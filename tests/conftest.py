from __future__ import annotations

import os

import numpy as np
import pytest

DATA = os.path.join(os.path.dirname(__file__), "data")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def data_path(*parts: str) -> str:
    return os.path.join(DATA, *parts)

"""Integer inputs keep their dtype through ``compile()``: tracing on example token ids and running
the compiled model on ids (embedding lookups), in process and through the standalone runner."""

from __future__ import annotations

import numpy as np

import compiler as xm
import compiler.functional as F
import compiler.module as M
from compiler.driver.targets import host_target


def test_token_ids_trace_and_run_as_integers() -> None:
    rng = np.random.default_rng(0)
    emb = M.Embedding(50, 8)
    ids = rng.integers(0, 50, size=(2, 5))  # int64, as numpy makes them
    compiled = xm.compile(lambda t: F.relu(emb(t)), target=host_target(), example_inputs=[ids])
    want = np.maximum(emb.weight.numpy()[ids], 0)
    np.testing.assert_allclose(compiled(ids), want, rtol=1e-6)
    (got,) = compiled.run_runner([ids.astype(np.int32)])
    np.testing.assert_allclose(got, want, rtol=1e-6)

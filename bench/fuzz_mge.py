"""Longer fuzz run of the .mge reader over mutated golden files: python bench/fuzz_mge.py [N] [SEED]."""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.test_mge_robustness import fuzz  # noqa: E402

if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    t0 = time.perf_counter()
    cases = fuzz(n, seed)
    print(f"{cases} mutated files loaded or rejected with MgeFormatError in {time.perf_counter() - t0:.1f}s")

"""The ``optimize_for_inference`` option table: its metadata words against MegEngine's own files and
the spec's observed values, its pass names against the registry, and reading the word back."""

from __future__ import annotations

import glob

import pytest

from backends.mge.container import parse_file
from backends.mge.reader import dump_options, read_mge
from passes.inference import InferenceOptions, pipeline_for
from passes.inference.options import (
    OPTIONS,
    InferenceOptionError,
    keywords_from_word,
    metadata_word,
    parse_options,
)
from passes.registry import builtin_passes
from tests.mge_helpers import dump_bytes, traced

# spec A.8: the words MegEngine 1.13's trace.dump records
OBSERVED = {
    (): 64,
    ("enable_io16xc32",): 65,
    ("enable_ioc16",): 66,
    ("enable_fuse_conv_bias_nonlinearity",): 68,
    ("enable_fuse_conv_bias_with_z",): 72,
    ("enable_fuse_preprocess",): 96,
    ("enable_nchw44",): 17179869248,
    ("enable_nchw44", "enable_fuse_conv_bias_nonlinearity"): 17179869252,
    ("enable_nchw4",): 4294967360,
    ("enable_hwcd4",): 8589934656,
    ("enable_nchw44_dot",): 21474836544,
    ("enable_nchw32",): 25769803840,
    ("enable_chwn4",): 30064771136,
}


@pytest.mark.parametrize("keywords,word", OBSERVED.items())
def test_metadata_word_matches_megengine(keywords: tuple[str, ...], word: int) -> None:
    enabled = parse_options(dict.fromkeys(keywords, True))
    assert metadata_word(enabled) == word
    decoded = keywords_from_word(word)
    assert {k for k, v in decoded.items() if v} == enabled
    assert set(decoded) == {o.keyword for o in OPTIONS}


def test_fuse_grain_off_is_word_zero() -> None:
    assert InferenceOptions.from_kwargs({"enable_fuse_grain": False}).metadata_word() == 0


def test_golden_files_words_round_trip() -> None:
    words = {g.metadata.optimize_options for f in glob.glob("/work/shared/golden/**/*.mge", recursive=True)
             for g in parse_file(open(f, "rb").read())}  # fmt: skip
    assert len(words) > 3
    for word in words:
        assert metadata_word(k for k, v in keywords_from_word(word).items() if v) == word


def test_unknown_layout_value_is_named() -> None:
    with pytest.raises(InferenceOptionError, match="LayoutTransform value 9"):
        keywords_from_word(9 << 32)


def test_every_option_pass_is_registered() -> None:
    table = builtin_passes()
    for option in OPTIONS:
        if option.pass_name is None:
            assert option.missing_reason, option.keyword
            with pytest.raises(InferenceOptionError, match=f"{option.keyword} is not implemented"):
                pipeline_for(**{option.keyword: True})
        else:
            assert option.pass_name in table, option.pass_name
            assert option.pass_name in [p.name for p in pipeline_for(**{option.keyword: True})]


def test_reader_reads_the_options_back() -> None:
    tr = traced("convnet")
    data = dump_bytes(tr, enable_nchw44=True, enable_fuse_conv_bias_nonlinearity=True)
    got = dump_options(next(iter(read_mge(data).ops)))  # type: ignore[arg-type]
    assert got is not None
    assert {k for k, v in got.items() if v} == {
        "enable_nchw44",
        "enable_fuse_conv_bias_nonlinearity",
        "enable_fuse_grain",
    }
    noopt = dump_options(next(iter(read_mge(dump_bytes(tr, optimize_for_inference=False)).ops)))  # type: ignore[arg-type]
    assert noopt is not None and not any(noopt.values())


def test_dump_of_training_graph_is_a_runtime_error() -> None:
    # MegEngine asserts there (a RuntimeError); xmge's error is also a ValueError, as before
    import io

    import numpy as np

    import compiler as xm
    import compiler.module as M
    from compiler.jit import trace

    bn = M.BatchNorm2d(2)

    @trace(symbolic=True, capture_as_const=True)
    def f(x):  # type: ignore[no-untyped-def]
        return bn(x).sum()

    f(xm.tensor(np.ones((2, 2, 3, 3), np.float32)))
    with pytest.raises(RuntimeError, match="training-only"):
        f.dump(io.BytesIO())

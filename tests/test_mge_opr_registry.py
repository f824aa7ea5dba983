"""Every operator of MegEngine 1.13's serialization registry is either read by xmge or refused with
an explained reason (backends.mge.oprs.REFUSED): a new MegEngine operator cannot slip through."""

from __future__ import annotations

import os

import pytest

from backends.mge.oprs import OPRS, REFUSED

REGISTRY = os.path.join(os.path.dirname(__file__), "data", "mge_opr_registry_1_13.txt")


def _registry() -> list[str]:
    with open(REGISTRY) as f:
        return [line.split()[0] for line in f if line.strip() and not line.startswith("#")]


def _read_names() -> set[str]:
    names: set[str] = set()
    for o in OPRS:
        if o.read is None and o.kind != "Host2DeviceCopy":  # graph inputs: read by the reader itself
            continue
        names.update(n for n in (o.regname, o.v2name) if n)
    return names


def test_registry_table_is_complete() -> None:
    names = _registry()
    assert len(names) == len(set(names)) > 150
    assert {"Elemwise", "ConvBiasForwardV4", "Subtensor", "SetSubtensor", "Linspace"} <= set(names)


@pytest.mark.parametrize("name", _registry())
def test_operator_is_read_or_refused_with_a_reason(name: str) -> None:
    read, refused = name in _read_names(), name in REFUSED
    assert read or refused, f"{name}: neither read by xmge nor on oprs.REFUSED"
    assert not (read and refused), f"{name}: both read and refused"
    if refused:
        assert len(REFUSED[name]) > 20


def test_refusals_name_registry_operators() -> None:
    assert set(REFUSED) <= set(_registry()) | {"Cross", "Flip", "Where", "WhereBackward", "NonZero"} | {
        "ExponentialRNG",
        "MultinomialRNG",
    }


def test_refused_operator_error_gives_the_reason() -> None:
    import struct

    from backends.mge.read_context import MgeUnsupportedError
    from backends.mge.reader import read_mge
    from backends.mge.schema import h_short
    from tests.conftest import data_path

    with open(data_path("multi_io", "named.mge"), "rb") as f:
        data = bytearray(f.read())
    tid = struct.pack("<Q", h_short("Elemwise"))
    j = data.find(tid)
    data[j : j + 8] = struct.pack("<Q", h_short("Rotate"))
    with pytest.raises(
        MgeUnsupportedError, match="Rotate is not supported by xmge: not produced by the model zoo"
    ):
        read_mge(bytes(data))

"""Every C emitter is a view of its ISA's :mod:`backends.c.isa_facts` record: the knobs the templates
render with (vector type, intrinsic spellings, GEMM blocking, cflags) come from one place."""

from __future__ import annotations

import pytest

from backends.c.arm import ArmPlainEmitter
from backends.c.isa_facts import ARM_PLAIN, ISA_FACTS, KNOBS
from backends.c.isas import ISA_EMITTERS
from backends.c.match import gemm_blocking


@pytest.mark.parametrize("isa", sorted(ISA_EMITTERS))
def test_emitter_is_its_record(isa: str) -> None:
    emitter = ISA_EMITTERS[isa]
    assert emitter.facts is ISA_FACTS[isa]
    assert {k: getattr(emitter, k) for k in KNOBS} == {k: getattr(ISA_FACTS[isa], k) for k in KNOBS}
    assert gemm_blocking(isa) == {"mr": emitter.gemm_mr, "nr": emitter.gemm_nr, "kc": emitter.gemm_kc}


def test_every_record_has_an_emitter() -> None:
    assert set(ISA_FACTS) == set(ISA_EMITTERS)
    assert ArmPlainEmitter.facts is ARM_PLAIN and ArmPlainEmitter.cflags[-1] == "-fno-tree-vectorize"


def test_extension_levels_add_flags() -> None:
    # an extension level is AVX-512's vector knobs plus its own -m flags, in order
    base, vnni, amx = ISA_FACTS["avx512"], ISA_FACTS["avx512vnni"], ISA_FACTS["amx"]
    assert vnni.vtype == base.vtype and vnni.cflags[: len(base.cflags)] == base.cflags
    assert amx.cflags[: len(vnni.cflags)] == vnni.cflags and "-mamx-tile" in amx.cflags

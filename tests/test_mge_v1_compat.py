"""FBS v1 (``MGBC``) dumps that real MegEngine 1.13 accepts, checked without MegEngine.

MegEngine's v1 loader runs ``flatbuffers::Verifier`` over the size-prefixed graph *including its
size word* and refuses the whole file ("model verification failed") on any alignment, bounds or
type error. xmge once wrote the v1 FlatBuffer aligned after the size word: its own reader read it,
MegEngine refused every file (8-byte ``Graph.hash``/``Operator.type_id`` at 4 mod 8).
:mod:`backends.mge.verify` repeats those checks; these tests pin them against our dumps and
against MegEngine's own files (tests/data, copied from the golden corpus).
"""

from __future__ import annotations

import glob
import hashlib
import os
import struct
from itertools import accumulate

import flatbuffers
import pytest

from backends.mge.container import parse_file
from backends.mge.reader import read_mge
from backends.mge.verify import FbsVerifyError, verify_buffer, verify_file
from backends.mge.writer import write_mge
from tests.conftest import DATA, data_path
from tests.mge_helpers import dump_bytes, traced

NAMED = {"arg_names": ["image", "scale"], "output_names": ["feat", "score"]}
VARIANTS: dict[str, dict[str, dict[str, object]]] = {
    "convnet": {
        "plain": {"arg_names": ["data"]},
        "noopt": {"arg_names": ["data"], "optimize_for_inference": False},
        "fuse": {"arg_names": ["data"], "enable_fuse_conv_bias_nonlinearity": True},
        "keepnames": {
            "arg_names": ["data"],
            "keep_opr_name": True,
            "keep_param_name": True,
            "keep_var_name": 2,
            "keep_opr_priority": True,
        },
    },
    "multi_io": {
        "named": NAMED,
        "noopt": {**NAMED, "optimize_for_inference": False},
        "named_fuse": {**NAMED, "enable_fuse_conv_bias_nonlinearity": True},
        "keepnames": {**NAMED, "keep_opr_name": True, "keep_var_name": 2},
        "default_names": {},
    },
}
VARIANTS["mini_resnet"] = dict(VARIANTS["convnet"])
GOLDEN_FILES = sorted(glob.glob(os.path.join(DATA, "*", "*.mge")))


@pytest.fixture(scope="module")
def traces() -> dict[str, object]:
    return {case: traced(case) for case in VARIANTS}


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _header(data: bytes) -> tuple[int, bytes, int, int]:
    return struct.unpack_from("<I8sIQ", data, 0)


# -- the verifier accepts what MegEngine writes ---------------------------------------------------


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=lambda p: os.path.relpath(p, DATA))
def test_megengine_files_pass_the_verifier(path: str) -> None:
    data = _read(path)
    reports = verify_file(data)
    assert [r.format for r in reports] == [g.format for g in parse_file(data)]
    assert sum(r.size for r in reports) == len(data)
    assert not any(r.census.unknown_union_tags for r in reports)


# -- our dumps pass it ---------------------------------------------------------------------------


@pytest.mark.parametrize("case,variant", [(c, v) for c, vs in VARIANTS.items() for v in vs])
def test_v1_dumps_pass_the_verifier(traces: dict[str, object], case: str, variant: str) -> None:
    data = dump_bytes(traces[case], dump_format="FBS", **VARIANTS[case][variant])
    (report,) = verify_file(data)
    assert report.format == "FBS" and report.size == len(data)
    graph = parse_file(data)[0]
    assert graph.graph_hash and report.blob_bytes == sum(
        len(t.data) for o in graph.oprs for t in o.tensors if t.data is not None
    )


@pytest.mark.parametrize("case", list(VARIANTS))
def test_v2_dumps_pass_the_verifier(traces: dict[str, object], case: str) -> None:
    (report,) = verify_file(dump_bytes(traces[case]))
    assert report.format == "FBS_V2"


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=lambda p: os.path.relpath(p, DATA))
def test_golden_files_rewritten_as_v1_pass_the_verifier(path: str) -> None:
    data = write_mge(read_mge(_read(path)), dump_format="FBS")
    reports = verify_file(data)
    assert all(r.format == "FBS" for r in reports) and len(reports) == len(parse_file(_read(path)))


def test_v1_append_file_verifies_graph_by_graph(traces: dict[str, object], tmp_path: object) -> None:
    path = os.path.join(str(tmp_path), "two.mge")
    tr = traces["multi_io"]
    tr.dump(path, dump_format="FBS", **NAMED)
    first = len(_read(path))
    tr.dump(path, dump_format="FBS", append=True, **NAMED)
    reports = verify_file(_read(path))
    assert [(r.format, r.offset) for r in reports] == [("FBS", 0), ("FBS", first)]


# -- container layout: the same as MegEngine's file ------------------------------------------------


def _layout(data: bytes) -> dict[str, object]:
    magic, features, reserved, offset_to_fbs = _header(data)
    fbs = 24 + offset_to_fbs
    size = struct.unpack_from("<I", data, fbs)[0]
    graph = parse_file(data)[0]
    positions = [(t.data_pos, len(t.data)) for o in graph.oprs for t in o.tensors if t.data is not None]
    return {
        "magic": data[:4],
        "features": features,
        "reserved": reserved,
        "offset_to_fbs": offset_to_fbs,
        # blobs back to back from byte 24 in operator/tensor order, no padding
        "blobs_contiguous": [p for p, _ in positions]
        == list(accumulate((n for _, n in positions[:-1]), initial=24)),
        "blobs_fill_area": sum(n for _, n in positions) == offset_to_fbs,
        "size_word_is_rest_of_file": size == len(data) - fbs - 4,
        "identifier": data[fbs + 8 : fbs + 12],
        "root_aligned": (4 + struct.unpack_from("<I", data, fbs + 4)[0]) % 4 == 0,
        "blob_digests": sorted(hashlib.sha256(bytes(data[p : p + n])).hexdigest() for p, n in positions),
    }


@pytest.mark.parametrize("case", ["convnet", "mini_resnet"])
def test_v1_container_layout_matches_megengine(traces: dict[str, object], case: str) -> None:
    ours = _layout(dump_bytes(traces[case], dump_format="FBS", arg_names=["data"]))
    golden = _layout(_read(data_path(case, "fbs_v1.mge")))
    assert ours["magic"] == b"MGBC" and ours["features"] == b"\0" * 8 and ours["reserved"] == 0
    for key in ("blobs_contiguous", "blobs_fill_area", "size_word_is_rest_of_file", "root_aligned"):
        assert ours[key] and golden[key], key
    assert ours["identifier"] == golden["identifier"] == b"mgb1"
    # same weights after the same dump-time rewrites: the tensor area has the same size
    assert ours["offset_to_fbs"] == golden["offset_to_fbs"]
    if case == "convnet":  # no BN folding: bit-identical weights (order differs: MegEngine's DFS)
        assert ours["blob_digests"] == golden["blob_digests"]


def test_v1_tables_hold_what_megengine_writes(traces: dict[str, object]) -> None:
    ours = verify_file(dump_bytes(traces["mini_resnet"], dump_format="FBS", arg_names=["data"]))[0].census
    golden = verify_file(_read(data_path("mini_resnet", "fbs_v1.mge")))[0].census
    # MegEngine elides scalars equal to their defaults, we store every one; Operator.comp_node
    # (slot 4) is only written for ops whose config pins a device
    for kind in ("Graph", "Metadata", "Tensor", "DType", "CompNode"):
        assert golden.slots[kind] <= ours.slots[kind], kind
    assert golden.slots["Operator"] - {4} <= ours.slots["Operator"]
    assert {k for k in golden.slots if k.startswith("param.")} <= set(ours.slots)


# -- the verifier refuses what MegEngine refuses ----------------------------------------------------


def _tiny_graph(size_prefixed: bool) -> bytes:
    b = flatbuffers.Builder(64)
    b.StartObject(6)
    b.PrependUint64Slot(1, 0x1234, 0)  # Graph.hash: the first 8-byte field
    b.PrependUint32Slot(0, 101300, 0)
    root = b.EndObject()
    if size_prefixed:
        b.FinishSizePrefixed(root, b"mgb1")
        return bytes(b.Output())
    b.Finish(root, b"mgb1")  # the old writer: aligned after the size word
    payload = bytes(b.Output())
    return struct.pack("<I", len(payload)) + payload


def test_verifier_wants_alignment_relative_to_the_size_word() -> None:
    verify_buffer(_tiny_graph(True), b"mgb1")
    with pytest.raises(FbsVerifyError, match="Graph.1 is not 8-byte aligned"):
        verify_buffer(_tiny_graph(False), b"mgb1")


@pytest.fixture(scope="module")
def v1_convnet(traces: dict[str, object]) -> bytes:
    return dump_bytes(traces["convnet"], dump_format="FBS", arg_names=["data"], keep_var_name=2)


def _patch(data: bytes, pos: int, raw: bytes) -> bytes:
    return data[:pos] + raw + data[pos + len(raw) :]


def test_verifier_refuses_broken_v1_files(v1_convnet: bytes) -> None:
    data = v1_convnet
    fbs = 24 + _header(data)[3]
    size = struct.unpack_from("<I", data, fbs)[0]
    cases = {
        "bytes 4..7": _patch(data, 4, b"\1"),
        "feature bits": _patch(data, 8, b"\1"),
        "tensors hold": _patch(
            data[:24] + b"\0" * 4 + data[24:], 16, struct.pack("<Q", _header(data)[3] + 4)
        ),
        "identifier": _patch(data, fbs + 8, b"mgv1"),
        "runs past": _patch(data, fbs, struct.pack("<I", size + 4)),
        "zero offset": _patch(data, fbs + 4, b"\0\0\0\0"),
    }
    for expect, bad in cases.items():
        with pytest.raises(FbsVerifyError, match=expect):
            verify_file(bad)
    # a string without its NUL: the input name "data" is followed by its terminator
    name = data.index(b"data\0", fbs)
    with pytest.raises(FbsVerifyError, match="terminating NUL"):
        verify_file(_patch(data, name + 4, b"x"))

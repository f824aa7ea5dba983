"""backends/mge/fbs_schema.py: the declared tables number their slots as spec A.4 lists them."""

from __future__ import annotations

import pytest

import backends.mge  # noqa: F401 - the operator table adds its param tables first
from backends.mge.fbs_schema import (
    COMMON,
    DEFAULT_TENSOR_FORMAT,
    IMAGE2D_TENSOR_FORMAT,
    LINEAR_QUANTIZATION_PARAM,
    V1,
    V2,
    verifier_schema,
)

# (table, field, slot) as spec A.4 lists them; a union takes <name>_type, then <name>
SPEC_SLOTS = {
    "v1": [
        ("Graph", "hash", 1),
        ("Graph", "output_vars_idx", 4),
        ("Operator", "param_type", 1),
        ("Operator", "param", 2),
        ("Operator", "output_name", 5),
        ("Operator", "blobs", 9),
        ("Operator", "additional_params_type", 10),
        ("Operator", "name", 12),
        ("Tensor", "offset", 5),
        ("Metadata", "user_info", 2),
        ("Metadata", "optimize_options", 3),
    ],
    "v2": [
        ("Model", "nr_shared_tensor", 6),
        ("Model", "metadata", 7),
        ("Operator", "name", 2),
        ("Operator", "additional_params", 6),
        ("Operator", "output_dtype", 10),
        ("Operator", "opr_version", 12),
        ("Operator", "custom_data", 14),
        ("Tensor", "format_type", 4),
        ("Tensor", "data", 6),
        ("Metadata", "optimize_options", 2),
        ("OutputAlias", "name", 1),
    ],
}


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_slots_follow_the_spec(version: str) -> None:
    schema = V1 if version == "v1" else V2
    for table, field, slot in SPEC_SLOTS[version]:
        assert getattr(getattr(schema, table), field) == slot, (version, table, field)
    assert COMMON.DType.param == 2 and COMMON.LinearQuantizationParam.zero_point == 1


def test_union_tags_and_structs() -> None:
    assert (LINEAR_QUANTIZATION_PARAM, DEFAULT_TENSOR_FORMAT, IMAGE2D_TENSOR_FORMAT) == (1, 1, 2)
    assert V1.structs["OutputVar"] == (8, 4)
    root, tables, unions = verifier_schema(b"mgb1")
    assert root == "Graph"
    assert tables["Graph"][4] == ("vstruct", 8, 4)
    assert tables["Operator"][11] == ("vu", "OperatorParam", 10)
    assert unions["OperatorParam"][67] == "DType" and unions["OperatorParam"][3] == "param.Convolution"
    assert tables["param.Convolution"]  # the param tables join the union's members


def test_unknown_names_are_refused_by_name() -> None:
    with pytest.raises(AttributeError, match="table Operator has no field 'outputs'"):
        _ = V1.Operator.outputs  # FBS v1 has no outputs list (ids are implicit)
    with pytest.raises(AttributeError, match="no FlatBuffers table 'MiddleTensor'"):
        _ = V1.MiddleTensor
    with pytest.raises(ValueError, match="unknown identifier"):
        verifier_schema(b"abcd")

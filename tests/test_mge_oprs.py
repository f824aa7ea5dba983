"""The operator table: every row consistent, ids unique, and each IR op written through its row."""

from __future__ import annotations

import ast
import pathlib

from backends.mge import oprs
from backends.mge.schema import h_full, h_short
from dialects import tensor as T

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_rows_are_unique_and_complete() -> None:
    assert len(oprs.BY_KIND) == len(oprs.OPRS)
    for row in oprs.OPRS:
        if row.ir_ops:
            assert row.lower is not None, row.kind  # an IR op the writer could not dispatch
        if row.regname is None:
            assert row.read is None and row.v2name is None, row.kind  # never in a file
    ids = [row.persist_id for row in oprs.OPRS if row.regname is not None]
    assert len(set(ids)) == len(ids)
    for row in oprs.OPRS:
        if row.regname is not None:
            assert oprs.BY_V2_ID[(h_short(row.regname), 1)] is row
            assert oprs.BY_V2_ID[row.v2_id(2)[1:]] is row  # what the writer writes, the reader finds
    assert all(h_full(n) in oprs.KNOWN_NAMES for n in ("Rotate", "Where"))


def test_every_ir_op_has_at_most_one_row() -> None:
    seen: dict[type, str] = {}
    for row in oprs.OPRS:
        for cls in row.ir_ops:
            assert cls not in seen, (cls, seen.get(cls), row.kind)
            seen[cls] = row.kind
    assert oprs.BY_IR_OP[T.SplitOp].kind == "Split" and oprs.BY_IR_OP[T.ArgminOp].kind == "Argmin"


def test_backends_do_not_import_the_frontend() -> None:
    for path in (ROOT / "backends").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] != "compiler", f"{path.relative_to(ROOT)} imports {name}"

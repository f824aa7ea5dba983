"""Regenerates ``tables.json``: MegEngine 1.13's enum numbers, param field orders and union tags.

The numbers xmge writes into ``.mge`` files must be MegEngine's. This script reads them from a
MegEngine git checkout at a release tag, never from xmge, so ``tests/test_enum_numbers.py`` can
compare the two. Usage::

    python tests/data/megengine_1_13/extract_tables.py GIT_DIR [TAG]   # default TAG: v1.13.4

Sources (paths in github.com/MegEngine/MegEngine):

* ``dnn/scripts/opr_param_defs.py`` and ``tools/param_defs/mgb_opr_param_defs.py``: every
  ``param.X`` table (fields in declaration order, which is the FlatBuffers slot order of the
  generated ``opr_param_defs.fbs``) and every enum with its explicit ``NAME = N`` numbers. They
  are Python files calling ``pdef(...)``; they are executed here against a minimal recorder.
* ``src/serialization/impl/schema.fbs``: ``union OperatorParam`` tags.
* ``src/serialization/impl/dtype.fbs``: ``enum DTypeEnum`` (a byte; declaration order).
* ``src/opr/impl/mgb_cpp_opr.fbs``: ``enum AxisDescMethod`` (declaration order).
* ``src/core/include/megbrain/graph/cg.h``: ``enum LayoutTransform`` (declaration order).
* ``src/gopt/include/megbrain/gopt/inference.h``: ``OptimizeForInferenceOptions::serialize`` bits.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "tables.json")
DEFAULT_TAG = "v1.13.4"

# gen_param_defs.py's member dtypes, as the ``struct`` format of the value in the file
FIELD_FORMATS = {"uint32": "I", "uint64": "Q", "int32": "i", "float32": "f", "float64": "d", "bool": "?"}
ENUM_FORMAT = "I"  # generated FlatBuffers enums are ``: uint``
DTYPE_FIELD_FORMAT = "b"  # ``dtype:DTypeEnum`` is a byte


class Doc:
    """Stands in for gen_param_defs' ``Doc``: an identifier with a doc string."""

    def __init__(self, ident: str, doc: str = "", **_: Any) -> None:
        self.id = ident


def _ident(v: object) -> str:
    return v.id if isinstance(v, Doc) else str(v)


def _member(text: str) -> tuple[str, int]:
    name, _, value = (s.strip() for s in text.partition("="))
    if "<<" in value:  # bit-combination enums: ``NAME = 1 << k``
        base, shift = (int(s) for s in value.split("<<"))
        return name, base << shift
    return name, int(value)


class ParamRecorder:
    """Records what ``pdef(...)`` chains declare: fields in order, enums with their numbers."""

    all: dict[str, ParamRecorder] = {}

    def __init__(self, name: str, doc: object = "", *, version: int = 0, is_legacy: bool = False) -> None:
        self.name = name + (f"V{version}" if is_legacy else "")
        self.fields: list[list[Any]] = []
        self.enums: dict[str, dict[str, int]] = {}
        self._defaults: dict[str, int] = {}
        self._consts: dict[str, object] = {}
        ParamRecorder.all[self.name] = self

    def add_fields(self, dtype: str, *names_defaults: object) -> ParamRecorder:
        for name, default in zip(names_defaults[::2], names_defaults[1::2], strict=True):
            fmt = DTYPE_FIELD_FORMAT if dtype == "dtype" else FIELD_FORMATS[dtype]
            default = self._consts.get(str(default), default)  # OptionalAxisV1: INVALID_AXIS
            self.fields.append([_ident(name), fmt, str(default), None])
        return self

    def _enum_field(self, enum: str, name_field: str | None, source: str, default: int) -> None:
        field = name_field or enum[0].lower() + enum[1:]
        self.fields.append([field, ENUM_FORMAT, str(default), f"{source}.{enum}"])

    def _default_number(self, enum: dict[str, int], default: object) -> int:
        """gen_param_defs' defaults: a member index or name; a tuple of names for bit enums."""
        names = list(enum)
        if isinstance(default, tuple):
            return sum(1 << (names.index(d) if isinstance(d, str) else d) for d in default)
        return enum[default] if isinstance(default, str) else enum[names[int(default)]]

    def add_enum(
        self, name: object, *members: object, name_field: str | None = None, default: object = 0, **_: Any
    ) -> ParamRecorder:
        enum = _ident(name)
        self.enums[enum] = dict(_member(_ident(m)) for m in members)
        self._defaults[enum] = self._default_number(self.enums[enum], default)
        self._enum_field(enum, name_field, self.name, self._defaults[enum])
        return self

    add_bit_combination_enum = add_enum

    def add_enum_alias(
        self,
        name: str,
        src_class: str,
        src_name: str | None = None,
        name_field: str | None = None,
        default: object = None,
        **_: Any,
    ) -> ParamRecorder:
        source = ParamRecorder.all[src_class]
        source_enum = src_name or name
        self.enums[name] = dict(source.enums[source_enum])
        number = (
            source._defaults[source_enum]
            if default is None
            else self._default_number(self.enums[name], default)
        )
        self._defaults[name] = number
        self._enum_field(name, name_field, src_class, number)
        return self

    def add_const(self, dtype: str, name: str, value: object) -> ParamRecorder:
        self._consts[name] = self._consts.get(str(value), value)
        return self

    def add_zero_attn(self, *_: object, **__: Any) -> ParamRecorder:
        return self

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"pdef recorder: MegEngine's param defs call .{name}(), which it does not know")


def _show(git_dir: str, tag: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", git_dir, "show", f"{tag}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def _declaration_order(text: str, header: str) -> dict[str, int]:
    body = re.search(header + r"[^{]*\{(.*?)\}", text, re.S)
    if body is None:
        raise SystemExit(f"no {header!r} found")
    code = re.sub(r"//[^\n]*", "", body.group(1))
    names = [n.strip() for n in code.split(",") if n.strip()]
    return {n: i for i, n in enumerate(names)}


def extract(git_dir: str, tag: str) -> dict[str, Any]:
    ParamRecorder.all = {}
    with tempfile.TemporaryDirectory() as tmp:
        for path in ("dnn/scripts/opr_param_defs.py", "tools/param_defs/mgb_opr_param_defs.py"):
            source = _show(git_dir, tag, path)
            script = os.path.join(tmp, os.path.basename(path))
            with open(script, "w") as f:
                f.write(source)
            exec(compile(source, script, "exec"), {"pdef": ParamRecorder, "Doc": Doc})
    schema = _show(git_dir, tag, "src/serialization/impl/schema.fbs")
    union = re.search(r"union OperatorParam \{(.*?)\}", schema, re.S)
    assert union is not None
    tags = {
        m.group(1): int(m.group(2)) for m in re.finditer(r"^\s*([\w.]+)\s*=\s*(\d+)", union.group(1), re.M)
    }
    inference_h = _show(git_dir, tag, "src/gopt/include/megbrain/gopt/inference.h")
    serialize = re.search(r"uint64_t serialize\(\) \{(.*?)return ret;", inference_h, re.S)
    assert serialize is not None
    bits = {
        m.group(1): int(m.group(2) or 0)
        for m in re.finditer(r"if \((\w+)\)\s*ret \|= 1u(?: << (\d+))?;", serialize.group(1))
    }
    commit = subprocess.run(
        ["git", "-C", git_dir, "rev-parse", f"{tag}^{{commit}}"], check=True, capture_output=True, text=True
    ).stdout.strip()
    return {
        "_source": f"github.com/MegEngine/MegEngine tag {tag} (commit {commit}); regenerate with "
        "tests/data/megengine_1_13/extract_tables.py",
        "params": {
            name: {"fields": p.fields, "enums": p.enums} for name, p in sorted(ParamRecorder.all.items())
        },
        "operator_param_tags": tags,
        "dtype_enum": _declaration_order(
            _show(git_dir, tag, "src/serialization/impl/dtype.fbs"), r"enum DTypeEnum"
        ),
        "axis_desc_method": _declaration_order(
            _show(git_dir, tag, "src/opr/impl/mgb_cpp_opr.fbs"), r"enum AxisDescMethod"
        ),
        "layout_transform": _declaration_order(
            _show(git_dir, tag, "src/core/include/megbrain/graph/cg.h"), r"enum LayoutTransform"
        ),
        "optimize_option_bits": bits,
    }


def main(argv: list[str]) -> None:
    if len(argv) not in (2, 3):
        raise SystemExit(__doc__)
    tables = extract(argv[1], argv[2] if len(argv) == 3 else DEFAULT_TAG)
    fd, tmp = tempfile.mkstemp(dir=HERE, suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(tables, f, indent=1, sort_keys=True)
        f.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, OUT)  # atomically: a failed run leaves the old table
    print(f"wrote {OUT}: {len(tables['params'])} param defs")


if __name__ == "__main__":
    main(sys.argv)

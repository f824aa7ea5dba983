"""Pictures of models: the operator graph as SVG (``xmge inspect --graph``) and a kernel profile as a
Chrome trace (``xmge bench --profile --chrome-trace``, opens in Perfetto or chrome://tracing).

The SVG is written directly (no Graphviz needed): operators are placed in layers by their longest
path from the inputs, each box names the operator, its model name and its result's shape, dtype and
layout, and a line joins each operand to its user."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr, TensorType
from xdsl.ir import Operation, SSAValue

from dialects.dtypes import dtype_name

BOX_W, BOX_H, GAP_X, GAP_Y = 230, 46, 24, 30


def _type_text(v: SSAValue) -> str:
    t = v.type
    if not isinstance(t, TensorType):
        return str(t)
    shape = "x".join(str(d) for d in t.get_shape()) or "scalar"
    layout = f" {t.encoding.data}" if hasattr(t.encoding, "data") and isinstance(t.encoding.data, str) else ""
    try:
        dt = dtype_name(t.element_type)
    except Exception:  # noqa: BLE001 - an element type without a MegEngine name is shown as IR
        dt = str(t.element_type)
    return f"{shape} {dt}{layout}"


def _label(op: Operation) -> tuple[str, str]:
    name = op.attributes.get("name")
    title = op.name
    for key in ("callee", "family", "mode"):
        attr = op.attributes.get(key) or op.properties.get(key)
        if attr is not None:
            title += f" {getattr(attr, 'data', attr)}"
            break
    detail = name.data if isinstance(name, StringAttr) else ""
    if op.results:
        detail = (detail + " : " if detail else "") + _type_text(op.results[0])
    return title, detail


def graph_svg(module: ModuleOp, entry: int = 0) -> str:
    """The operator graph of the ``entry``-th function of ``module`` as an SVG document; every
    operator except constants is one ``<g class="op">`` whose ``<title>`` is its IR name; inputs and
    the outputs are ``<g class="input">`` / ``<g class="output">``."""
    fn = [op for op in module.ops if isinstance(op, func.FuncOp)][entry]
    ops = [op for op in fn.body.block.ops if op.name not in ("mgb.const", "kernel.weight")]
    layer: dict[SSAValue, int] = {a: 0 for a in fn.body.block.args}
    placed: list[tuple[Operation | SSAValue, int]] = [(a, 0) for a in fn.body.block.args]
    for op in ops:
        depth = 1 + max((layer.get(v, 0) for v in op.operands), default=0)
        for r in op.results:
            layer[r] = depth
        placed.append((op, depth))
    rows: dict[int, list[Operation | SSAValue]] = {}
    for item, depth in placed:
        rows.setdefault(depth, []).append(item)
    pos: dict[int, tuple[int, int]] = {}
    for depth, items in rows.items():
        for k, item in enumerate(items):
            pos[id(item)] = (GAP_X + k * (BOX_W + GAP_X), GAP_Y + depth * (BOX_H + GAP_Y))
    width = GAP_X + max(len(r) for r in rows.values()) * (BOX_W + GAP_X)
    height = GAP_Y + (max(rows) + 1) * (BOX_H + GAP_Y)
    owner: dict[SSAValue, Operation | SSAValue] = {a: a for a in fn.body.block.args}
    for op in ops:
        for r in op.results:
            owner[r] = op
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="monospace" font-size="11">'
    ]
    for op in ops:
        x1, y1 = pos[id(op)]
        for v in op.operands:
            src = owner.get(v)
            if src is None or id(src) not in pos:
                continue
            x0, y0 = pos[id(src)]
            out.append(
                f'<line class="edge" x1="{x0 + BOX_W // 2}" y1="{y0 + BOX_H}" x2="{x1 + BOX_W // 2}" '
                f'y2="{y1}" stroke="#888"/>'
            )
    for item, _ in placed:
        x, y = pos[id(item)]
        if isinstance(item, func.ReturnOp):
            title, detail, cls, fill = (
                "output",
                ", ".join(_type_text(v) for v in item.operands),
                "output",
                "#fce8e6",
            )
        elif isinstance(item, Operation):
            title, detail = _label(item)
            cls, fill = "op", "#e8f0fe"
        else:
            title, detail, cls, fill = "input", _type_text(item), "input", "#e6f4ea"
        out.append(
            f'<g class="{cls}"><title>{html.escape(title)}</title>'
            f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6" fill="{fill}" stroke="#446"/>'
            f'<text x="{x + 6}" y="{y + 18}">{html.escape(title[:34])}</text>'
            f'<text x="{x + 6}" y="{y + 36}" fill="#555">{html.escape(detail[:36])}</text></g>'
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def chrome_trace(rows: Sequence[tuple[str, float]]) -> str:
    """A Chrome trace (JSON, trace-event format) of per-kernel times ``(name, ms per run)``: one
    complete event per kernel, laid end to end as one run spends them."""
    events = []
    t = 0.0
    for name, ms in rows:
        events.append(
            {"name": name, "cat": "kernel", "ph": "X", "ts": t * 1e3, "dur": ms * 1e3, "pid": 1, "tid": 1}
        )
        t += ms
    return json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}, indent=1)

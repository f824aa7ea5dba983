"""Pictures of models: the operator graph as SVG (``xmge inspect --graph``), a profile as a Chrome
trace (``xmge bench --profile --chrome-trace``, opens in Perfetto or chrome://tracing) and as a
per-layer latency bar chart (``xmge bench --profile --plot``, a PNG drawn by
:mod:`compiler.driver.raster`, no plotting library needed).

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
from xdsl.utils.exceptions import VerifyException

from compiler.driver.raster import Canvas, text_width
from dialects import kernel as K
from dialects.dtypes import dtype_name
from passes.target import KernelTime

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


def _kernel_choice(call: K.CallOp) -> str:
    """``conv2d_gemm/avx2 +bias+res+relu``: the kernel family and ISA a call runs, with the epilogue
    fused into it."""
    try:
        d = call.definition()
    except VerifyException:  # a call outside a module (no symbol table): its symbol says it all
        return call.callee.string_value()
    params = d.param_values()
    fused = "".join(f"+{label}" for key, label in (("bias", "bias"), ("residual", "res")) if params.get(key))
    act = params.get("act")
    fused += f"+{act}" if isinstance(act, str) and act not in ("", "none", "identity") else ""
    return f"{d.family.data}/{d.isa.data}" + (f" {fused}" if fused else "")


def _label(op: Operation) -> tuple[str, str]:
    """(the box's first line, its second): the op and its kind, or for a kernel call the chosen
    kernel; then the model's name of the operator and the result's type."""
    name = op.attributes.get("name") or op.attributes.get("scope")
    if isinstance(op, K.CallOp):
        detail = name.data if isinstance(name, StringAttr) else ""
        if op.results:
            detail = (detail + " : " if detail else "") + _type_text(op.results[0])
        return _kernel_choice(op), detail
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
    operator except constants is one ``<g class="op">`` whose ``<title>`` is its IR name (a kernel
    call's: ``kernel.call @symbol``, its box the kernel family, ISA and fused epilogue); inputs and
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
            shown = title = "output"
            detail, cls, fill = ", ".join(_type_text(v) for v in item.operands), "output", "#fce8e6"
        elif isinstance(item, K.CallOp):
            shown, detail = _label(item)
            title = f"kernel.call @{item.callee.string_value()}"
            cls, fill = "op", "#fef7e0"
        elif isinstance(item, Operation):
            title, detail = _label(item)
            shown = title
            cls, fill = "op", "#e8f0fe"
        else:
            shown = title = "input"
            detail, cls, fill = _type_text(item), "input", "#e6f4ea"
        out.append(
            f'<g class="{cls}"><title>{html.escape(title)}</title>'
            f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6" fill="{fill}" stroke="#446"/>'
            f'<text x="{x + 6}" y="{y + 18}">{html.escape(shown[:34])}</text>'
            f'<text x="{x + 6}" y="{y + 36}" fill="#555">{html.escape(detail[:36])}</text></g>'
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def chrome_trace(rows: Sequence[KernelTime]) -> str:
    """A Chrome trace (JSON, trace-event format) of a profiled run: one complete event per kernel
    call, named after the model's operator it computes (the kernel symbol in ``args``), laid end to
    end in the order the run makes the calls."""
    events = []
    t = 0.0
    for row in rows:
        events.append(
            {
                "name": row.layer,
                "cat": "kernel",
                "ph": "X",
                "ts": t * 1e3,
                "dur": row.ms * 1e3,
                "pid": 1,
                "tid": 1,
                "args": {"kernel": row.kernel, "family": row.family},
            }
        )
        t += row.ms
    return json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}, indent=1)


BAR_RGB = (66, 133, 244)
AXIS_RGB = (150, 150, 150)
CHART = {"margin": 12, "row": 20, "bar": 14, "bar_w": 520, "label_chars": 48, "scale": 2}


def _fit(text: str, chars: int) -> str:
    # the end of a layer name is its most specific part (layer4.1.RELU[1])
    return text if len(text) <= chars else "..." + text[-(chars - 3) :]


def latency_chart(rows: Sequence[KernelTime], title: str) -> bytes:
    """A PNG bar chart of a profiled run: one horizontal bar per kernel call, in run order from the
    top, labelled with the model's operator name, then its time in ms per run and the kernel
    family; bar length is proportional to the time (every bar at least one pixel long)."""
    if not rows:
        raise ValueError("no kernel calls to chart")
    m, row_h, bar_h, bar_w, sc = (CHART[k] for k in ("margin", "row", "bar", "bar_w", "scale"))
    labels = [_fit(r.layer, CHART["label_chars"]) for r in rows]
    values = [f"{r.ms:.3f} ms {r.family}" for r in rows]
    label_w = max(text_width(lb, sc) for lb in labels)
    x0 = m + label_w + m  # where every bar starts
    top = m + 2 * row_h + m
    peak = max(r.ms for r in rows)
    total = sum(r.ms for r in rows)
    width = max(x0 + bar_w + m + max(text_width(v, sc) for v in values) + m, m + text_width(title, sc) + m)
    height = top + len(rows) * row_h + m + row_h + m
    c = Canvas(width, height)
    c.text(m, m, title, scale=sc)
    c.text(m, m + row_h, f"ms per run, total {total:.3f} ms, {len(rows)} kernel calls in run order", scale=sc)
    c.rect(x0 - 2, top - 4, 1, len(rows) * row_h + 8, AXIS_RGB)
    for k, (row, label, value) in enumerate(zip(rows, labels, values, strict=True)):
        y = top + k * row_h
        c.text(x0 - m - text_width(label, sc), y + (bar_h - 7 * sc) // 2 + 1, label, scale=sc)
        length = max(1, round(bar_w * row.ms / peak)) if peak > 0 else 1
        c.rect(x0, y, length, bar_h, BAR_RGB)
        c.text(x0 + length + m // 2, y + (bar_h - 7 * sc) // 2 + 1, value, (60, 60, 60), scale=sc)
    axis_y = top + len(rows) * row_h + m // 2
    c.rect(x0, axis_y, bar_w, 1, AXIS_RGB)
    c.text(x0, axis_y + 4, "0", (60, 60, 60), scale=sc)
    tick = f"{peak:.3f} ms"
    c.text(x0 + bar_w - text_width(tick, sc), axis_y + 4, tick, (60, 60, 60), scale=sc)
    return c.png()

"""MegEngine's MultiHeadAttn packing of every projection into one ``io_weight_bias`` tensor: the
single definition that ``F.nn.multi_head_attention`` (compiler/functional/attention.py) and the
``.mge`` reader of MultiHeadAttnForward (backends/mge/attention_ops.py) both split it by."""

from __future__ import annotations

from collections.abc import Sequence


def io_weight_layout(
    proj_sizes: Sequence[int], biases: Sequence[bool], widths: Sequence[int]
) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of each piece of ``io_weight_bias``, in storage order: the query, key, value
    and output weights ``wq``/``wk``/``wv``/``wo`` (in_features, out_features: ``x @ W``), then the
    biases ``bq``/``bk``/``bv``/``bo``. ``proj_sizes`` are (qproj, kproj, vproj, oproj), 0 for a
    projection left out (no weight, no bias); ``biases`` the (q, k, v, o) bias flags; ``widths`` the
    query, key and value input widths (the output projection reads the value projection's width,
    or the value width when that projection is left out)."""
    qp, kp, vp, op = (int(s) for s in proj_sizes)
    eq, ek, ev = (int(w) for w in widths)
    layout = [
        (name, (width, size))
        for name, size, width in (
            ("wq", qp, eq),
            ("wk", kp, ek),
            ("wv", vp, ev),
            ("wo", op, vp if vp > 0 else ev),
        )
        if size > 0
    ]
    layout += [
        (name, (size,))
        for name, flag, size in zip(("bq", "bk", "bv", "bo"), biases, (qp, kp, vp, op), strict=True)
        if flag and size > 0
    ]
    return layout

"""Shape and data-movement functions (MegEngine's ``functional.tensor``)."""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from compiler.core import apply, axis_error, op_error, symbolic_shape
from compiler.tensor import Tensor, as_tensor
from dialects import enums
from dialects import tensor as T
from dialects.dtypes import DTypeError, tensor_type


def _axis(label: str, axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise axis_error(label, f"axis {axis} is out of range for a {ndim}-D tensor")
    return axis % ndim


def reshape(inp: Tensor, target_shape: Sequence[int] | int) -> Tensor:
    inp = as_tensor(inp)
    shape = (
        [int(target_shape)] if isinstance(target_shape, int | np.integer) else [int(s) for s in target_shape]
    )
    unknown = [i for i, s in enumerate(shape) if s == -1]
    if len(unknown) > 1:
        raise op_error("reshape", f"at most one -1 is allowed in the target shape {tuple(shape)}")
    known = math.prod(s for s in shape if s != -1)
    if unknown:
        if known == 0 or inp.size % known:
            raise op_error("reshape", f"cannot reshape {inp.shape} into {tuple(shape)}")
        shape[unknown[0]] = inp.size // known
    if math.prod(shape) != inp.size or any(s < 0 for s in shape):
        raise op_error("reshape", f"cannot reshape {inp.shape} ({inp.size} elements) into {tuple(shape)}")
    keep_unspec = bool(unknown) and symbolic_shape.user_call_in_symbolic_trace()
    if symbolic_shape.is_graph_shape(target_shape) or keep_unspec:
        # MegEngine keeps the -1 in the graph: the size is inferred when the graph runs
        given = target_shape if not isinstance(target_shape, int | np.integer) else [target_shape]
        return symbolic_shape.reshape_to(inp, given, shape, unknown[0] if unknown else -1)
    (out,) = apply(T.ReshapeOp, [inp], label="reshape", result_types=[tensor_type(shape, inp.dtype)])
    return out


def flatten(inp: Tensor, start_axis: int = 0, end_axis: int = -1) -> Tensor:
    inp = as_tensor(inp)
    if inp.ndim == 0:
        return reshape(inp, (1,))
    start, end = _axis("flatten", start_axis, inp.ndim), _axis("flatten", end_axis, inp.ndim)
    if start > end:
        raise op_error("flatten", f"start_axis {start_axis} is after end_axis {end_axis}")
    shape = (*inp.shape[:start], math.prod(inp.shape[start : end + 1]), *inp.shape[end + 1 :])
    return reshape(inp, shape)


def transpose(inp: Tensor, pattern: Sequence[int | str]) -> Tensor:
    inp = as_tensor(inp)
    pat = tuple(-1 if p == "x" else int(p) for p in pattern)
    (out,) = apply(T.DimshuffleOp, [inp], label="transpose", pattern=pat)
    return out


dimshuffle = transpose


def astype(inp: Tensor, dtype: Any) -> Tensor:
    inp = as_tensor(inp)
    try:
        target = tensor_type(inp.shape, dtype)
    except DTypeError as exc:
        raise op_error("astype", str(exc)) from None
    if target == tensor_type(inp.shape, inp.dtype):
        return inp
    (out,) = apply(T.TypeCvtOp, [inp], label="astype", result_types=[target])
    return out


def broadcast_to(inp: Tensor, shape: Sequence[int | None] | Tensor) -> Tensor:
    """``inp`` broadcast to ``shape`` (a sequence or an int tensor); a ``None`` entry keeps the
    size of the input axis it aligns with (from the right), as in MegEngine."""
    inp = as_tensor(inp)
    given = shape
    if isinstance(shape, Tensor):
        shape = [int(v) for v in shape.numpy().reshape(-1)]
    target = list(shape)
    offset = len(target) - inp.ndim
    for i, s in enumerate(target):
        if s is None:
            if i < offset:
                raise op_error("broadcast_to", f"None at axis {i} of {tuple(target)} matches no input axis")
            target[i] = inp.shape[i - offset]
    shape = tuple(int(s) for s in target)
    if symbolic_shape.is_graph_shape(given):
        if not isinstance(given, Tensor) and any(s is None for s in given):
            # a None keeps the input's size: from the input's shape in the graph too
            of_inp = symbolic_shape.shape_of(inp)
            given = [_getitem(of_inp, i - offset) if s is None else s for i, s in enumerate(given)]
        return symbolic_shape.broadcast_to(inp, given, shape)
    if inp.shape == shape:
        return inp
    try:
        if T.broadcast_shapes("broadcast_to", [inp.shape, shape]) != shape:
            raise T.ShapeInferenceError("broadcast_to", "")
    except T.ShapeInferenceError:
        raise op_error("broadcast_to", f"cannot broadcast shape {inp.shape} to {shape}") from None
    (out,) = apply(T.BroadcastOp, [inp], label="broadcast_to", result_types=[tensor_type(shape, inp.dtype)])
    return out


def _axis_add_remove(inp: Tensor, methods: list[Any], axes: list[int], label: str) -> Tensor:
    (out,) = apply(T.AxisAddRemoveOp, [inp], label=label, methods=tuple(methods), axes=tuple(axes))
    return out


def expand_dims(inp: Tensor, axis: int | Sequence[int]) -> Tensor:
    inp = as_tensor(inp)
    axes = [axis] if isinstance(axis, int) else list(axis)
    ndim = inp.ndim + len(axes)
    normalized = sorted(_axis("expand_dims", a, ndim) for a in axes)
    if len(set(normalized)) != len(normalized):
        raise axis_error("expand_dims", f"repeated axis in {axes}")
    return _axis_add_remove(inp, [enums.AxisMethod.ADD_1] * len(normalized), normalized, "expand_dims")


def squeeze(inp: Tensor, axis: int | Sequence[int] | None = None) -> Tensor:
    inp = as_tensor(inp)
    if axis is None:
        axes = [i for i, s in enumerate(inp.shape) if s == 1]
    else:
        axes = [_axis("squeeze", a, inp.ndim) for a in ([axis] if isinstance(axis, int) else axis)]
    for a in axes:
        if inp.shape[a] != 1:
            raise op_error("squeeze", f"cannot remove axis {a} of size {inp.shape[a]} (shape {inp.shape})")
    if not axes:
        return inp
    # remove from the highest axis down so earlier removals do not shift later ones
    ordered = sorted(set(axes), reverse=True)
    return _axis_add_remove(inp, [enums.AxisMethod.REMOVE] * len(ordered), ordered, "squeeze")


def _on_device(label: str, device: Any) -> None:
    """``device=`` of concat/stack/copy: the result's device, which must be one xmge computes on (a
    CPU); a GPU or a malformed name is refused, as MegEngine refuses a device it does not have."""
    if device is None:
        return
    from compiler.device import DeviceError, _check

    try:
        _check(device if isinstance(device, str) else str(device))
    except DeviceError as exc:
        raise op_error(label, str(exc)) from None


def _placed(out: Tensor, device: Any) -> Tensor:
    """``out`` tagged with the device ``device=`` named (the values stay in host memory)."""
    if device is not None:
        out._device = str(device)
    return out


def concat(inps: Sequence[Tensor], axis: int = 0, device: Any = None) -> Tensor:
    from compiler.functional.elemwise import _promote

    _on_device("concat", device)
    tensors = _promote([as_tensor(t) for t in inps])
    if not tensors:
        raise op_error("concat", "needs at least one tensor")
    if len(tensors) == 1:
        return tensors[0] if device is None else _placed(reshape(tensors[0], tensors[0].shape), device)
    ax = _axis("concat", axis, tensors[0].ndim)
    devices = sorted({str(t.device).split(":")[0] for t in tensors if t._device is not None})
    if device is None and len(devices) > 1:
        raise op_error("concat", f"inputs are on different devices {devices}; name one with device=")
    (out,) = apply(T.ConcatOp, tensors, label="concat", axis=ax)
    return _placed(out, device)


def stack(inps: Sequence[Tensor], axis: int = 0, device: Any = None) -> Tensor:
    _on_device("stack", device)
    tensors = [as_tensor(t) for t in inps]
    if not tensors:
        raise op_error("stack", "needs at least one tensor")
    shapes = {t.shape for t in tensors}
    if len(shapes) > 1:
        raise op_error("stack", f"all tensors must have the same shape, got {sorted(shapes)}")
    ax = _axis("stack", axis, tensors[0].ndim + 1)
    return concat([expand_dims(t, ax) for t in tensors], axis=ax, device=device)


def split(inp: Tensor, nsplits_or_sections: int | Sequence[int], axis: int = 0) -> list[Tensor]:
    inp = as_tensor(inp)
    ax = _axis("split", axis, inp.ndim)
    dim = inp.shape[ax]
    if isinstance(nsplits_or_sections, int):
        n = nsplits_or_sections
        if n <= 0 or n > dim:
            raise op_error("split", f"cannot split axis {ax} of size {dim} into {n} parts")
        base, extra = divmod(dim, n)
        sizes = [base + (1 if i < extra else 0) for i in range(n)]
    else:
        points = [0, *[int(p) for p in nsplits_or_sections], dim]
        if any(b < a for a, b in zip(points, points[1:], strict=False)):
            raise op_error(
                "split", f"split points {list(nsplits_or_sections)} must be increasing within {dim}"
            )
        sizes = [b - a for a, b in zip(points, points[1:], strict=False)]
    return apply(T.SplitOp, [inp], label="split", axis=ax, sizes=tuple(sizes))


def where(mask: Tensor, x: Any, y: Any) -> Tensor:
    """``mask ? x : y`` elementwise, as MegEngine composes it from SWITCH_GT0."""
    from compiler.functional.elemwise import _elemwise, _promote

    mask = as_tensor(mask)
    if mask.dtype.kind != "b":
        raise op_error("where", f"mask must be a bool tensor, got {mask.dtype}")
    if not isinstance(x, Tensor) and not isinstance(y, Tensor):
        raise op_error("where", "at least one of x and y must be a Tensor")
    x_t = as_tensor(x, y if isinstance(y, Tensor) else None)
    y_t = as_tensor(y, x_t)
    x_t, y_t = _promote([x_t, y_t])
    out_dtype = x_t.dtype
    if out_dtype.kind == "b":
        # SWITCH_GT0 and SUB have no bool form; select in int32 and cast back
        x_t, y_t = astype(x_t, "int32"), astype(y_t, "int32")
    m = astype(mask, x_t.dtype)
    picked_x = _elemwise("SWITCH_GT0", m, x_t, label="where")
    picked_y = _elemwise("SWITCH_GT0", _elemwise("SUB", 1, m, label="where"), y_t, label="where")
    out = _elemwise("ADD", picked_x, picked_y, label="where")
    return astype(out, out_dtype)


def _is_vector_index(item: Any) -> bool:
    return isinstance(item, Tensor | list | np.ndarray)


def _getitem(inp: Tensor, index: Any) -> Tensor:
    """Basic indexing with ints, slices, ``None`` and ``...``: one ``mgb.subtensor`` (+ axis adds);
    integer tensors/lists on some axes (others whole): ``mgb.indexing_multi_axis_vec``."""
    if not isinstance(index, tuple):
        index = (index,)
    if any(_is_vector_index(i) for i in index):
        ints = [isinstance(i, int | np.integer) and not isinstance(i, bool) for i in index]
        if any(ints) and not any(i is Ellipsis or i is None for i in index):
            # ints beside tensors: take the ints first (a subtensor drops their axes), then the
            # tensors on the axes left, which stay adjacent as numpy places them when they were
            pairs = list(zip(index, ints, strict=True))
            picked = _getitem(inp, tuple(i if is_int else slice(None) for i, is_int in pairs))
            return _getitem(picked, tuple(i for i, is_int in pairs if not is_int))
        index = _masks_as_indices(inp, index)
        axes, indices = _vector_index("getitem", inp, index)
        (out,) = apply(T.IndexingMultiAxisVecOp, [inp, *indices], label="getitem", axes=axes)
        return out
    params, new_axes = _basic_index("getitem", inp, index)
    out = inp
    if params["axes"]:
        (out,) = apply(T.SubtensorOp, [inp], label="getitem", **params)
    if new_axes:
        out = _axis_add_remove(out, [enums.AxisMethod.ADD_1] * len(new_axes), new_axes, "getitem")
    return out


def _masks_as_indices(inp: Tensor, index: tuple[Any, ...]) -> tuple[Any, ...]:
    """A boolean mask over k axes becomes k integer index vectors (its true positions, read from
    its value now: the result's size depends on the data, as MegEngine's does)."""
    out: list[Any] = []
    for item in index:
        arr = item.numpy() if isinstance(item, Tensor) else item if isinstance(item, np.ndarray) else None
        if arr is not None and arr.dtype == np.bool_:
            out.extend(np.nonzero(arr))
        else:
            out.append(item)
    return tuple(out)


def _vector_index(label: str, inp: Tensor, index: tuple[Any, ...]) -> tuple[tuple[int, ...], list[Tensor]]:
    """Axes and int32 index tensors of an advanced index: integer tensors/lists on some axes,
    whole slices (``:`` or ``...``) on the others, as MegEngine's IndexingMultiAxisVec takes them."""
    if sum(1 for i in index if i is Ellipsis) > 1:
        raise op_error(label, "only one ... is allowed")
    n_real = sum(1 for i in index if i is not Ellipsis)
    if n_real > inp.ndim:
        raise op_error(label, f"too many indices for a {inp.ndim}-D tensor")
    expanded: list[Any] = []
    for i in index:
        expanded.extend([slice(None)] * (inp.ndim - n_real) if i is Ellipsis else [i])
    axes: list[int] = []
    indices: list[Tensor] = []
    for axis, item in enumerate(expanded):
        if _is_vector_index(item):
            arr = None if isinstance(item, Tensor) else np.asarray(item)
            idx = item if arr is None else Tensor(arr.astype(np.int32) if arr.size == 0 else arr)
            if idx.dtype.kind not in "iu":
                raise op_error(
                    label, f"index tensors must hold integers, got {idx.dtype} (bool masks are not supported)"
                )
            if idx.dtype != np.int32:
                idx = astype(idx, "int32")
            axes.append(axis)
            indices.append(idx)
        elif item != slice(None):
            raise op_error(
                label,
                f"an index mixing tensors with {item!r} is not supported; use whole slices beside tensors",
            )
    return tuple(axes), indices


def _setitem(inp: Tensor, index: Any, value: Any) -> Tensor:
    """``inp`` with ``inp[index] = value`` applied: ``mgb.set_subtensor`` for basic indices,
    ``mgb.indexing_set_multi_axis_vec`` for integer tensors; ``value`` is cast to ``inp``'s dtype
    and broadcast to the selection (as MegEngine's ``__setitem__`` does)."""
    if not isinstance(index, tuple):
        index = (index,)
    value = as_tensor(value, like=inp)
    if value.dtype != inp.dtype:
        value = astype(value, inp.dtype)
    if any(_is_vector_index(i) for i in index):
        axes, indices = _vector_index("setitem", inp, index)
        (want,) = T.IndexingMultiAxisVecOp.infer(
            [tensor_type(inp.shape, inp.dtype), *(tensor_type(i.shape, i.dtype) for i in indices)], axes=axes
        )
        value = _broadcast_value(value, tuple(want.get_shape()))
        (out,) = apply(T.IndexingSetMultiAxisVecOp, [inp, value, *indices], label="setitem", axes=axes)
        return out
    if any(i is None for i in index):
        raise op_error("setitem", "None (a new axis) is not allowed in an assignment index")
    params, _ = _basic_index("setitem", inp, index)
    want = tuple(np.empty(inp.shape, np.bool_)[tuple(_numpy_key(inp.ndim, params))].shape)
    value = _broadcast_value(value, want)
    (out,) = apply(T.SetSubtensorOp, [inp, value], label="setitem", **params)
    return out


def _numpy_key(ndim: int, params: dict[str, tuple[int, ...]]) -> list[Any]:
    key: list[Any] = [slice(None)] * ndim
    for axis, start, stop, step, drop in zip(
        *(params[k] for k in ("axes", "starts", "stops", "steps", "drop")), strict=True
    ):
        key[axis] = start if drop else slice(start, stop, step)
    return key


def _broadcast_value(value: Tensor, shape: tuple[int, ...]) -> Tensor:
    if value.shape == shape:
        return value
    if value.ndim > len(shape):  # leading 1s beyond the selection's rank (MegEngine drops them)
        extra = value.ndim - len(shape)
        if any(d != 1 for d in value.shape[:extra]):
            raise op_error(
                "setitem", f"cannot assign a value of shape {value.shape} to a selection of shape {shape}"
            )
        value = reshape(value, value.shape[extra:])
    try:
        np.broadcast_shapes(value.shape, shape)
    except ValueError:
        raise op_error(
            "setitem", f"cannot assign a value of shape {value.shape} to a selection of shape {shape}"
        ) from None
    return broadcast_to(value, shape)


def _basic_index(
    label: str, inp: Tensor, index: tuple[Any, ...]
) -> tuple[dict[str, tuple[int, ...]], list[int]]:
    """SubtensorOp's parameters for a basic index, and the positions of its new (None) axes."""
    n_real = sum(1 for i in index if i is not None and i is not Ellipsis)
    if n_real > inp.ndim:
        raise op_error(label, f"too many indices for a {inp.ndim}-D tensor")
    if sum(1 for i in index if i is Ellipsis) > 1:
        raise op_error(label, "only one ... is allowed")
    expanded: list[Any] = []
    for i in index:
        if i is Ellipsis:
            expanded.extend([slice(None)] * (inp.ndim - n_real))
        else:
            expanded.append(i)
    expanded.extend([slice(None)] * (inp.ndim - sum(1 for i in expanded if i is not None)))
    axes, starts, stops, steps, drop = [], [], [], [], []
    new_axes: list[int] = []
    dim = 0
    out_pos = 0
    for item in expanded:
        if item is None:
            new_axes.append(out_pos)
            out_pos += 1
            continue
        size = inp.shape[dim]
        if isinstance(item, slice):
            if item.step == 0:
                raise op_error(label, f"slice step cannot be zero (axis {dim})")
            start, stop, step = item.indices(size)
            if step < 0 and stop < 0:
                # slice.indices() writes "run past the front" as stop = -1, which a slice would
                # read as "the last element"; -size-1 keeps the meaning when re-sliced
                stop = -size - 1
            if (start, stop, step) != (0, size, 1):
                axes.append(dim)
                starts.append(start)
                stops.append(stop)
                steps.append(step)
                drop.append(0)
            out_pos += 1
        else:
            try:
                k = operator.index(item)  # ints and numpy ints; not floats, strings or bools-as-masks
            except TypeError:
                raise op_error(
                    label, f"index {item!r} ({type(item).__name__}) is not an int, slice, None or ..."
                ) from None
            if not -size <= k < size:
                raise op_error(label, f"index {k} is out of bounds for axis {dim} with size {size}")
            k %= size
            axes.append(dim)
            starts.append(k)
            stops.append(k + 1)
            steps.append(1)
            drop.append(1)
        dim += 1
    params = {
        "axes": tuple(axes),
        "starts": tuple(starts),
        "stops": tuple(stops),
        "steps": tuple(steps),
        "drop": tuple(drop),
    }
    return params, new_axes


def _filled(shape: Any, value: Any, dtype: Any, device: Any) -> Tensor:
    """``shape`` filled with ``value``: a constant, or with a shape computed in the graph, the
    value broadcast to it (MegEngine's Fill: Broadcast of a one-element constant)."""
    if symbolic_shape.is_graph_shape(shape):
        static = [int(v) for v in (shape.numpy().reshape(-1) if isinstance(shape, Tensor) else shape)]
        one = Tensor(np.full((1,), value), dtype=dtype, device=device)
        return symbolic_shape.broadcast_to(one, shape, static, label="full")
    return Tensor(np.full(shape, value), dtype=dtype, device=device)


def zeros(shape: Sequence[int] | int, dtype: Any = "float32", device: Any = None) -> Tensor:
    return _filled(shape, 0, dtype, device)


def ones(shape: Sequence[int] | int, dtype: Any = "float32", device: Any = None) -> Tensor:
    return _filled(shape, 1, dtype, device)


def _scalar_dtype(value: Any) -> str:
    """The dtype MegEngine gives a Python scalar: bool, int32 or float32."""
    if isinstance(value, bool | np.bool_):
        return "bool"
    if isinstance(value, int | np.integer):
        return "int32"
    return "float32"


def full(shape: Sequence[int] | int, value: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """A tensor of ``shape`` filled with ``value``; without ``dtype``, the value's (a bool gives a
    bool tensor, an int an int32 one, a float a float32 one)."""
    if isinstance(value, Tensor):
        value = value.numpy()
    if dtype is None:
        dtype = np.asarray(value).dtype if isinstance(value, np.ndarray) else _scalar_dtype(value)
    return _filled(shape, value, dtype, device)


def zeros_like(inp: Tensor) -> Tensor:
    return Tensor(np.zeros(inp.shape), dtype=inp.dtype)


def ones_like(inp: Tensor) -> Tensor:
    return Tensor(np.ones(inp.shape), dtype=inp.dtype)


def full_like(inp: Tensor, value: Any) -> Tensor:
    return Tensor(np.full(inp.shape, value), dtype=inp.dtype)


def arange(
    start: float = 0, stop: float | None = None, step: float = 1, dtype: Any = "float32", device: Any = None
) -> Tensor:
    if stop is None:
        start, stop = 0, start
    from compiler.core import active_recorders

    if any(isinstance(b, Tensor) for b in (start, stop, step)) and active_recorders():
        return _traced_arange(start, stop, step, dtype)
    return Tensor(_arange_values(float(start), float(stop), float(step)), dtype=dtype, device=device)


def _arange_values(start: float, stop: float, step: float) -> np.ndarray:
    """MegEngine's arange eagerly: the bounds are float32 tensors, ``num = ceil((stop - start) / step)``
    and the last value ``start + step * (num - 1)`` are computed in float32, and the values come from
    Linspace's kernel (double arithmetic between the float32 bounds, rounded to float32)."""
    if step == 0:
        raise op_error("arange", "step must not be 0")
    s, e, st = np.float32(start), np.float32(stop), np.float32(step)
    with np.errstate(over="ignore", invalid="ignore"):
        count = np.ceil(np.float32(e - s) / st)
    if not np.isfinite(count):
        raise op_error("arange", f"cannot count the values from {start} to {stop} by {step}")
    num = max(int(count), 0)
    last = np.float32(s + np.float32(st * np.float32(num - 1)))
    return _linspace_values(s, last, num)


def _linspace_values(start: np.float32, stop: np.float32, num: int) -> np.ndarray:
    """Linspace's values between float32 bounds, by its reference kernel (the op's one definition)."""
    from semantics.kernels import linspace as linspace_kernel

    return linspace_kernel([np.float32(start), np.float32(stop)], [], num=num, endpoint=True)[0]


def _traced_arange(start: Any, stop: Any, step: Any, dtype: Any) -> Tensor:
    """MegEngine's arange: ``num = ceil((stop - start) / step)`` values from ``start`` to
    ``start + step * (num - 1)`` by ``mgb.linspace``; the bounds stay in the graph (``num`` is
    known now: xmge's shapes are static)."""
    from compiler import functional as F

    bounds = [
        astype(b, "float32") if isinstance(b, Tensor) else Tensor(np.float32(b)) for b in (start, stop, step)
    ]
    start_t, stop_t, step_t = (reshape(b, (1,)) if b.shape != (1,) else b for b in bounds)
    num = math.ceil((float(stop_t.numpy()[0]) - float(start_t.numpy()[0])) / float(step_t.numpy()[0]))
    num = max(num, 0)
    last = F.add(start_t, F.mul(step_t, float(num - 1)))
    (out,) = apply(T.LinspaceOp, [start_t, last], label="arange", num=num, endpoint=True)
    return out if np.dtype(dtype) == np.float32 else astype(out, dtype)


def repeat(inp: Tensor, repeats: int, axis: int | None = None) -> Tensor:
    """Each element ``repeats`` times in a row along ``axis`` (of the flattened input if None),
    like ``np.repeat``; composed as expand_dims -> broadcast -> reshape."""
    inp = as_tensor(inp)
    given = repeats
    if isinstance(repeats, Tensor):
        if repeats.size != 1:
            raise op_error("repeat", f"repeats must hold one value, got shape {repeats._tuple_shape}")
        repeats = repeats.item()
    if int(repeats) != repeats or repeats < 1:
        raise op_error("repeat", f"repeats must be a positive int, got {repeats!r}")
    repeats = int(repeats)
    if axis is None:
        inp = reshape(inp, (inp.size,))
        axis = 0
    ax = _axis("repeat", axis, inp.ndim)
    if isinstance(given, Tensor) and symbolic_shape.is_graph_shape(given):
        # a Tensor count stays in the graph: a traced call with another count runs the same ops
        count = given if given.dtype == np.int32 else astype(given, "int32")
        shape = inp._tuple_shape
        wide = broadcast_to(expand_dims(inp, ax + 1), [*shape[: ax + 1], count, *shape[ax + 1 :]])
        return reshape(wide, [*shape[:ax], count * shape[ax], *shape[ax + 1 :]])
    if repeats == 1:
        return inp
    expanded = expand_dims(inp, ax + 1)
    wide = broadcast_to(expanded, (*inp.shape[: ax + 1], repeats, *inp.shape[ax + 1 :]))
    return reshape(wide, (*inp.shape[:ax], inp.shape[ax] * repeats, *inp.shape[ax + 1 :]))


def tile(inp: Tensor, reps: Sequence[int]) -> Tensor:
    """The input repeated ``reps[i]`` times as a block along each axis, like ``np.tile``."""
    inp = as_tensor(inp)
    reps = [int(r) for r in reps]
    if any(r < 1 for r in reps):
        raise op_error("tile", f"reps must be positive, got {reps}")
    if len(reps) < inp.ndim:
        reps = [1] * (inp.ndim - len(reps)) + reps
    if len(reps) > inp.ndim:
        inp = reshape(inp, (1,) * (len(reps) - inp.ndim) + inp.shape)
    out = inp
    for ax, r in enumerate(reps):
        if r == 1:
            continue
        shape = out.shape
        wide = broadcast_to(expand_dims(out, ax), (*shape[:ax], r, *shape[ax:]))
        out = reshape(wide, (*shape[:ax], r * shape[ax], *shape[ax + 1 :]))
    return out


def linspace(start: float, stop: float, num: int, dtype: Any = "float32", device: Any = None) -> Tensor:
    """``num`` evenly spaced values from ``start`` to ``stop`` inclusive. As in MegEngine, the bounds
    become float32 tensors first and Linspace's kernel steps between them in double precision."""
    n = int(np.float32(float(num)))
    if n < 0:
        raise op_error("linspace", f"num must not be negative, got {num}")
    values = _linspace_values(np.float32(float(start)), np.float32(float(stop)), n)
    return Tensor(values, dtype=dtype, device=device)


def cumsum(inp: Tensor, axis: int) -> Tensor:
    """Cumulative sums of ``inp`` along ``axis``, each including its own element (MegEngine's
    ``Cumsum`` with ``exclusive=False, reverse=False``), in ``inp``'s dtype."""
    inp = as_tensor(inp)
    if inp.dtype.kind not in "fiu":
        raise op_error("cumsum", f"needs a numeric input, got {inp.dtype}")
    ax = _axis("cumsum", int(axis), inp.ndim)
    (out,) = apply(T.CumsumOp, [inp], label="cumsum", axis=ax, exclusive=False, reverse=False)
    return out


def copy(inp: Tensor, device: Any = None) -> Tensor:
    """A new tensor with ``inp``'s values (and its gradient path); ``device`` must be a CPU."""
    inp = as_tensor(inp)
    _on_device("copy", device)
    return _placed(reshape(inp, inp.shape), device)


def swapaxes(inp: Tensor, axis1: int, axis2: int) -> Tensor:
    """``inp`` with axes ``axis1`` and ``axis2`` exchanged."""
    inp = as_tensor(inp)
    a, b = _axis("swapaxes", axis1, inp.ndim), _axis("swapaxes", axis2, inp.ndim)
    pattern = list(range(inp.ndim))
    pattern[a], pattern[b] = pattern[b], pattern[a]
    return transpose(inp, pattern)


def roll(inp: Tensor, shift: int | Sequence[int], axis: int | Sequence[int] | None = None) -> Tensor:
    """Elements shifted by ``shift`` along ``axis`` (the flattened tensor when None), wrapping
    around: the two parts of a split exchanged by a concat."""
    inp = as_tensor(inp)
    shape = inp.shape
    if axis is None:
        if not isinstance(shift, int):
            raise op_error("roll", "one shift for the flattened tensor when axis is None")
        return reshape(roll(reshape(inp, (inp.size,)), shift, 0), shape)
    shifts = [shift] if isinstance(shift, int) else list(shift)
    axes = [axis] if isinstance(axis, int) else list(axis)
    if len(shifts) != len(axes):
        raise op_error("roll", f"{len(shifts)} shifts for {len(axes)} axes")
    out = inp
    for sh, ax in zip(shifts, axes, strict=True):
        a = _axis("roll", ax, inp.ndim)
        size = shape[a]
        k = sh % size if size else 0
        if k == 0:
            continue
        head, tail = split(out, [size - k], axis=a)
        out = concat([tail, head], axis=a)
    return out


def cond_take(mask: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
    """The elements of ``x`` where ``mask`` (same shape) is true, flattened, and their int32
    positions in the flattened ``x``: MegEngine's CondTake (``mgb.cond_take``, EQ against 1). The
    count depends on the data: the op's result types hold this call's count; a dump runs it with
    the count its inputs give. The values keep their gradient to ``x``."""
    x, mask = as_tensor(x), as_tensor(mask)
    if mask.shape != x.shape:
        raise op_error("cond_take", f"mask shape {mask.shape} differs from the data shape {x.shape}")
    if mask.dtype != np.bool_:
        raise op_error("cond_take", f"mask must be bool, got {mask.dtype}")
    from semantics.kernels import cond_take_selected

    count = int(np.count_nonzero(cond_take_selected(mask._data, 0, 1.0, 1e-6)))
    types = [tensor_type((count,), x.dtype), tensor_type((count,), "int32")]
    values, index = apply(T.CondTakeOp, [x, mask], label="cond_take", result_types=types)
    return values, index


def non_zero(condition: Tensor, as_tuple: bool = False) -> Tensor | tuple[Tensor, ...]:
    """int32 positions of the non-zero elements in C order: one row per element (``(n, ndim)``),
    or one ``(n,)`` tensor per axis with ``as_tuple``. The count depends on the data, so it is read
    from ``condition`` now (MegEngine's NonZero has no gradient either)."""
    arr = as_tensor(condition).numpy()
    idx = np.stack(np.nonzero(arr)).astype(np.int32) if arr.ndim else np.zeros((0, int(arr != 0)), np.int32)
    if as_tuple:
        return tuple(Tensor(np.ascontiguousarray(row)) for row in idx)
    return Tensor(np.ascontiguousarray(idx.T))


def _along_axis_index(label: str, inp: Tensor, axis: int, index: Tensor) -> tuple[int, tuple[Any, ...]]:
    ax = _axis(label, axis, inp.ndim)
    if index.ndim != inp.ndim:
        raise op_error(label, f"index has {index.ndim} dimensions, the input {inp.ndim}")
    for d, (n, m) in enumerate(zip(index.shape, inp.shape, strict=True)):
        if d != ax and n > m:
            raise op_error(label, f"index shape {index.shape} exceeds the input {inp.shape} at axis {d}")
    grids = np.meshgrid(*(np.arange(n, dtype=np.int32) for n in index.shape), indexing="ij")
    picks: list[Any] = [Tensor(g) for g in grids]
    idx = index if index.dtype == np.int32 else astype(index, "int32")
    picks[ax] = idx
    return ax, tuple(picks)


def gather(inp: Tensor, axis: int, index: Tensor) -> Tensor:
    """``out[i][j][k] = inp[index[i][j][k]][j][k]`` for axis 0 (and so on): MegEngine's gather, as
    one IndexingMultiAxisVec with the other axes' positions as index grids."""
    inp, index = as_tensor(inp), as_tensor(index)
    _, picks = _along_axis_index("gather", inp, axis, index)
    return _getitem(inp, picks)


def scatter(inp: Tensor, axis: int, index: Tensor, source: Tensor) -> Tensor:
    """``inp`` with ``out[index[i][j]][j] = source[i][j]`` for axis 0 (and so on); the last write
    wins where indices repeat, as MegEngine leaves it unspecified."""
    inp, index, source = as_tensor(inp), as_tensor(index), as_tensor(source)
    if source.shape != index.shape:
        raise op_error("scatter", f"source shape {source.shape} differs from the index shape {index.shape}")
    _, picks = _along_axis_index("scatter", inp, axis, index)
    return _setitem(inp, picks, source)


def eye(N: Any, M: Any = None, *, dtype: Any = "float32", device: Any = None) -> Tensor:  # noqa: N803
    """The ``N`` x ``M`` (default square) identity matrix. As in MegEngine, ``N`` may also be the
    shape itself (a list, tuple or Tensor of one or two sizes) when ``M`` is not given."""

    def size(v: Any, what: str) -> int:
        arr = np.asarray(v.numpy() if isinstance(v, Tensor) else v)
        if arr.size != 1 or arr.dtype.kind not in "iu" and not float(arr.reshape(-1)[0]).is_integer():
            raise op_error("eye", f"{what} must be one integer, got {v!r}")
        return int(arr.reshape(-1)[0])

    if M is None and (isinstance(N, list | tuple) or isinstance(N, Tensor) and N.ndim == 1):
        dims = list(np.asarray(N.numpy() if isinstance(N, Tensor) else N).reshape(-1))
        if len(dims) not in (1, 2):
            raise op_error("eye", f"shape must have one or two sizes, got {N!r}")
        N, M = dims[0], (dims[1] if len(dims) == 2 else None)  # noqa: N806
    rows = size(N, "N")
    cols = None if M is None else size(M, "M")
    return Tensor(np.eye(rows, cols), dtype=dtype, device=device)


def diag(inp: Tensor, k: int = 0) -> Tensor:
    """A 1-D input's values on the ``k``-th diagonal of a square matrix, or a 2-D input's ``k``-th
    diagonal as a vector."""
    inp = as_tensor(inp)
    if inp.ndim == 1:
        n = inp.shape[0] + abs(k)
        # k >= 0: column j holds v[j - k]; k < 0: row r holds v[r + k]; the identity's k-th
        # diagonal picks those out of the broadcast line
        line = concat([zeros((abs(k),), inp.dtype), inp]) if k else inp
        grid = broadcast_to(reshape(line, (1, n) if k >= 0 else (n, 1)), (n, n))
        return grid * Tensor(np.eye(n, n, k), dtype=inp.dtype)
    if inp.ndim == 2:
        rows, cols_n = inp.shape
        idx = [(i, i + k) for i in range(rows) if 0 <= i + k < cols_n]
        if not idx:
            return zeros((0,), inp.dtype)
        r = Tensor(np.array([i for i, _ in idx], np.int32))
        c = Tensor(np.array([j for _, j in idx], np.int32))
        return inp[r, c]
    raise op_error("diag", f"needs a 1-D or 2-D input, got shape {inp.shape}")


def meshgrid(*inputs: Tensor, indexing: str = "xy") -> list[Tensor]:
    """Coordinate grids from 1-D tensors (``"xy"``: the first two axes swapped, as numpy's)."""
    if indexing not in ("xy", "ij"):
        raise op_error("meshgrid", f"indexing must be 'xy' or 'ij', got {indexing!r}")
    vectors = [as_tensor(t) for t in inputs]
    for v in vectors:
        if v.ndim != 1:
            raise op_error("meshgrid", f"needs 1-D tensors, got shape {v.shape}")
    sizes = [v.shape[0] for v in vectors]
    if indexing == "xy" and len(vectors) >= 2:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    out = []
    for i, v in enumerate(vectors):
        axis = (1 if i == 0 else 0 if i == 1 else i) if indexing == "xy" and len(vectors) >= 2 else i
        view = [1] * len(vectors)
        view[axis] = v.shape[0]
        out.append(broadcast_to(reshape(v, view), sizes))
    return out


__all__ = [
    "arange",
    "cond_take",
    "gather",
    "non_zero",
    "scatter",
    "astype",
    "broadcast_to",
    "concat",
    "copy",
    "cumsum",
    "diag",
    "dimshuffle",
    "expand_dims",
    "eye",
    "flatten",
    "full",
    "full_like",
    "linspace",
    "meshgrid",
    "ones",
    "ones_like",
    "repeat",
    "reshape",
    "roll",
    "split",
    "squeeze",
    "stack",
    "swapaxes",
    "tile",
    "transpose",
    "where",
    "zeros",
    "zeros_like",
]

# MegEngine's complex numbers: a pair of float32 tensors (compiler/functional/complex.py)
from compiler.functional.complex import complex, imag, polar, real  # noqa: E402,I001

__all__ += ["complex", "imag", "polar", "real"]

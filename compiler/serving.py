"""Serving compiled models on Ray Serve, with dynamic batching.

xmge does not grow a server of its own: a compiled model is deployed onto Ray Serve, which runs the
same deployment on one machine and on a Ray cluster, with replicas, autoscaling and request batching.
This module holds two layers:

* :class:`ServedModel` and :class:`BatchRunner`, which know nothing of Ray: what a request may carry
  (names, dtypes, per-sample shapes, size caps), how requests are validated (:class:`RequestError`,
  answered with a 4xx), and how a list of requests becomes runs of the model at the batch sizes it was
  compiled for: concatenated, padded with zeros up to the next size, and split back per request.
* :func:`deployment` / :func:`run`, the Ray Serve deployment: ``POST /<name>`` with a JSON body
  ``{"inputs": {"data": [[...]]}}`` answers ``{"outputs": {"<output>": [[...]]}}``; a ``.npy`` body
  (one-input models) or ``.npz`` body answers an ``.npz``; ``GET /<name>/metadata`` describes the
  model and ``GET /<name>/metrics`` gives this replica's counters as Prometheus text. Ray itself
  answers readiness at ``GET /-/healthz``. In-cluster callers use the :class:`DeploymentHandle`
  that :func:`run` returns: ``handle.infer.remote({"data": x}).result()``.

An array whose rank is the model input's rank carries ``n`` samples along the first axis; one of rank
one less is a single sample, and its outputs come back without the batch axis. Every input of a
request carries the same number of samples.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import json
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dialects.errors import XmgeError

DEFAULT_BATCH_SIZES = (1, 2, 4, 8)  # every power of two: a partial batch pads to at most twice its size
DEFAULT_MAX_BODY_BYTES = 64 << 20
# latency buckets (seconds) of the per-request histogram, Prometheus style
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ServingError(XmgeError):
    """Serving could not start: the model source, an option, or Ray itself."""


class RequestError(XmgeError, ValueError):
    """A request the model cannot take (answered with ``status``, 400 or 413, and this one line)."""

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.status = status


class ModelFailure(XmgeError, RuntimeError):
    """The model failed on a valid request (answered with a 500 naming the model and the reason)."""


# ----------------------------------------------------------------------------------------------
# The model as the server sees it


@dataclass(frozen=True)
class TensorSpec:
    """One input or output: its name, its shape for one sample (without the batch axis), its dtype."""

    name: str
    sample_shape: tuple[int, ...]
    dtype: np.dtype

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "shape": ["batch", *self.sample_shape], "dtype": self.dtype.name}


@dataclass
class ServedModel:
    """A model compiled for several batch sizes. ``runners[b]`` runs a batch of exactly ``b`` samples:
    it takes one array per input (in ``inputs`` order, leading axis ``b``) and returns one per output."""

    name: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    runners: dict[int, Callable[[list[np.ndarray]], Sequence[np.ndarray]]]
    target: str = ""
    # the same batch sizes run on every worker's threads at once: for a batch too small to share
    wide_runners: dict[int, Callable[[list[np.ndarray]], Sequence[np.ndarray]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.runners:
            raise ServingError(f"model {self.name!r}: no batch sizes to serve")
        if any(b < 1 for b in self.runners):
            raise ServingError(f"model {self.name!r}: batch sizes must be >= 1, got {sorted(self.runners)}")

    @property
    def batch_sizes(self) -> list[int]:
        return sorted(self.runners)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "target": self.target,
            "batch_sizes": self.batch_sizes,
            "inputs": [s.describe() for s in self.inputs],
            "outputs": [s.describe() for s in self.outputs],
        }


def _specs(
    names: Sequence[str], shapes: Sequence[Sequence[int]], dtypes: Sequence[Any], batch: int
) -> list[TensorSpec]:
    specs = []
    for name, shape, dt in zip(names, shapes, dtypes, strict=True):
        shape = tuple(int(d) for d in shape)
        if not shape or shape[0] != batch:
            raise ServingError(
                f"{name}: shape {list(shape)} has no leading batch axis of {batch}; only models whose every "
                "input and output is batched along axis 0 can be served with batching"
            )
        specs.append(TensorSpec(name, shape[1:], np.dtype(dt)))
    return specs


def load_served_model(
    source: str | os.PathLike[str],
    *,
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    target: str | None = None,
    threads: int = 1,
    workers: int = 1,
    name: str | None = None,
) -> ServedModel:
    """The model to serve from ``source``: a saved package folder (its batch sizes are the variants it
    holds; loaded without compiling), or a ``.mge`` / ``.onnx`` file compiled here for ``target``
    (default: this machine) with one variant per batch size of ``batch_sizes``. With ``workers > 1``
    a second instance runs on ``threads * workers`` threads, for batches too small to share."""
    path = os.fspath(source)
    if os.path.isdir(path):
        from compiler.driver.package import load_compiled

        model: Any = load_compiled(path, threads=threads)
        stem = None
    elif os.path.isfile(path):
        from compiler.driver.compile import compile

        stem = _identifier(os.path.splitext(os.path.basename(path))[0])
        sizes = sorted(set(batch_sizes))
        model = compile(path, target, threads=threads, batch_sizes=sizes, name=name or stem)
    else:
        raise ServingError(f"{path}: no such model file or package folder")
    served = served_from_compiled(model, name=name or stem)
    if workers > 1:
        wide = model.with_threads(threads * workers)
        wide.loaded()
        served.wide_runners = {b: wide.run for b in served.runners}
    return served


def served_from_compiled(model: Any, name: str | None = None) -> ServedModel:
    """A :class:`ServedModel` from a compiled model or loaded package (``compile(..., batch_sizes=)``,
    ``load_compiled``): each variant's inputs and outputs share one leading batch axis, the variant's
    batch size; the model picks the variant by the shapes of what it is given."""
    from dialects.dtypes import numpy_dtype

    shapes = model.shapes
    variants = getattr(model, "variants", None)
    if variants:  # a loaded package: names, shapes and dtypes from its manifest
        ins, outs = variants[0].inputs, variants[0].outputs
        in_io = [(n, s, np.dtype(d)) for (n, s, _), d in zip(ins, variants[0].input_dtypes, strict=True)]
        out_io = [(n, s, np.dtype(d)) for (n, s, _), d in zip(outs, variants[0].output_dtypes, strict=True)]
    else:
        in_io = [
            (n, tuple(t.get_shape()), numpy_dtype(t.element_type))
            for n, t in zip(model.input_names, model.input_types, strict=True)
        ]
        out_io = [
            (n, tuple(t.get_shape()), numpy_dtype(t.element_type))
            for n, t in zip(model.output_names, model.output_types, strict=True)
        ]
    first = shapes[0][0][0] if shapes and shapes[0] and shapes[0][0] else 0
    inputs = _specs([n for n, _, _ in in_io], [s for _, s, _ in in_io], [d for _, _, d in in_io], first)
    outputs = _specs([n for n, _, _ in out_io], [s for _, s, _ in out_io], [d for _, _, d in out_io], first)
    runners: dict[int, Callable[[list[np.ndarray]], Sequence[np.ndarray]]] = {}
    for signature in shapes:
        b = signature[0][0] if signature and signature[0] else 0
        if [tuple(x) for x in signature] != [(b, *spec.sample_shape) for spec in inputs]:
            raise ServingError(
                f"model {model.name!r}: variant {[list(x) for x in signature]} is not the first variant's "
                "inputs with another batch size; only batch-size variants can be served with batching"
            )
        runners[b] = model.run
    if hasattr(model, "loaded"):
        model.loaded()  # the library and weights in memory now, not on the first request
    return ServedModel(name or model.name, inputs, outputs, runners, str(model.target))


def _identifier(text: str) -> str:
    out = "".join(c if c.isalnum() or c in "_-" else "_" for c in text)
    return out or "model"


# ----------------------------------------------------------------------------------------------
# Requests


@dataclass
class Request:
    """A validated request: one array per model input (leading axis ``samples``)."""

    arrays: list[np.ndarray]
    samples: int
    squeezed: bool  # the caller sent single samples without the batch axis
    binary: bool = False  # answer with an .npz body


def _convert(name: str, value: Any, spec: TensorSpec) -> np.ndarray:
    """``value`` as ``spec``'s dtype, or a :class:`RequestError` where that would change a value."""
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise RequestError(f"input {name!r}: not a rectangular array of numbers ({exc})") from None
    if arr.dtype == object or arr.dtype.kind in "USVMm":
        raise RequestError(f"input {name!r}: not an array of numbers (got {arr.dtype} values)")
    want = spec.dtype
    if arr.dtype == want:
        return arr
    if want.kind == "f":
        if arr.dtype.kind not in "biuf":
            raise RequestError(f"input {name!r}: {arr.dtype} values for a {want} input")
        return arr.astype(want)
    if want.kind in "iub":
        if arr.dtype.kind == "f":
            if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
                raise RequestError(f"input {name!r}: non-integer values for a {want} input")
        elif arr.dtype.kind not in "iub":
            raise RequestError(f"input {name!r}: {arr.dtype} values for a {want} input")
        if want.kind != "b" and arr.size:
            info = np.iinfo(want)
            lo, hi = arr.min(), arr.max()
            if lo < info.min or hi > info.max:
                raise RequestError(
                    f"input {name!r}: values [{lo}, {hi}] are out of range for {want} "
                    f"[{info.min}, {info.max}]"
                )
        return arr.astype(want)
    raise RequestError(f"input {name!r}: cannot take {arr.dtype} values as {want}")


def validate(model: ServedModel, feeds: dict[str, Any], *, max_samples: int, binary: bool = False) -> Request:
    """Check ``feeds`` (input name -> array-like) against ``model``: names, dtypes, shapes, sizes."""
    if not isinstance(feeds, dict):
        raise RequestError('the body must be {"inputs": {"<input name>": <array>, ...}}')
    names = [s.name for s in model.inputs]
    unknown = sorted(set(feeds) - set(names))
    if unknown:
        raise RequestError(f"unknown input(s) {unknown}; the model's inputs are {names}")
    missing = [n for n in names if n not in feeds]
    if missing:
        raise RequestError(f"missing input(s) {missing}; the model's inputs are {names}")
    arrays: list[np.ndarray] = []
    squeezed_flags = []
    for spec in model.inputs:
        arr = _convert(spec.name, feeds[spec.name], spec)
        if arr.shape == spec.sample_shape:
            arr, squeezed = arr[None], True
        elif arr.shape[1:] == spec.sample_shape and arr.ndim == len(spec.sample_shape) + 1:
            squeezed = False
        else:
            raise RequestError(
                f"input {spec.name!r}: shape {list(arr.shape)} is neither one sample "
                f"{list(spec.sample_shape)} "
                f"nor a batch [n, {', '.join(map(str, spec.sample_shape))}]"
            )
        arrays.append(np.ascontiguousarray(arr))
        squeezed_flags.append(squeezed)
    counts = {a.shape[0] for a in arrays}
    if len(counts) != 1:
        raise RequestError(f"the inputs carry different numbers of samples: {sorted(counts)}")
    (samples,) = counts
    if samples == 0:
        raise RequestError("the request carries no samples")
    if samples > max_samples:
        raise RequestError(f"{samples} samples in one request; at most {max_samples} are accepted", 413)
    return Request(arrays, samples, all(squeezed_flags), binary)


def parse_body(
    model: ServedModel, body: bytes, content_type: str, *, max_samples: int, max_bytes: int
) -> Request:
    """Read an HTTP body: JSON ``{"inputs": {...}}``, an ``.npy`` (one-input models) or an ``.npz``."""
    if len(body) > max_bytes:
        raise RequestError(f"the body has {len(body)} bytes; at most {max_bytes} are accepted", 413)
    if not body:
        raise RequestError('empty body: send JSON {"inputs": {...}}, an .npy or an .npz')
    if body[:6] == b"\x93NUMPY" or body[:4] == b"PK\x03\x04":
        return validate(model, _read_numpy(model, body), max_samples=max_samples, binary=True)
    if "json" not in content_type and body[:1] not in (b"{", b"[", b" ", b"\n"):
        raise RequestError(f"unsupported body ({content_type or 'no content type'}): send JSON, .npy or .npz")
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(f"the body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or "inputs" not in doc:
        raise RequestError('the body must be a JSON object {"inputs": {"<input name>": <array>, ...}}')
    return validate(model, doc["inputs"], max_samples=max_samples)


def _read_numpy(model: ServedModel, body: bytes) -> dict[str, Any]:
    try:
        got = np.load(io.BytesIO(body), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise RequestError(f"the body is not a readable .npy/.npz ({exc})") from None
    if isinstance(got, np.lib.npyio.NpzFile):
        with got:
            return {k: got[k] for k in got.files}
    if len(model.inputs) != 1:
        names = [s.name for s in model.inputs]
        raise RequestError(f"an .npy body feeds one input; this model has {names}: send an .npz")
    return {model.inputs[0].name: got}


# ----------------------------------------------------------------------------------------------
# Batching


@dataclass
class Metrics:
    """This replica's counters (exported as Prometheus text by :meth:`prometheus`)."""

    requests: int = 0
    failures: dict[int, int] = field(default_factory=dict)
    samples: int = 0
    batches: int = 0
    batch_samples: dict[int, int] = field(default_factory=dict)  # runs per compiled batch size
    padded_samples: int = 0
    latency_buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    latency_sum: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def observe_request(self, seconds: float, status: int) -> None:
        with self.lock:
            self.requests += 1
            if status >= 400:
                self.failures[status] = self.failures.get(status, 0) + 1
            self.latency_sum += seconds
            k = next((i for i, b in enumerate(LATENCY_BUCKETS) if seconds <= b), len(LATENCY_BUCKETS))
            self.latency_buckets[k] += 1

    def observe_run(self, batch: int, used: int) -> None:
        with self.lock:
            self.batches += 1
            self.samples += used
            self.padded_samples += batch - used
            self.batch_samples[batch] = self.batch_samples.get(batch, 0) + 1

    def prometheus(self, model: str) -> str:
        lab = f'model="{model}"'
        with self.lock:
            lines = [
                "# TYPE xmge_requests_total counter",
                f"xmge_requests_total{{{lab}}} {self.requests}",
                "# TYPE xmge_request_failures_total counter",
                *(
                    f'xmge_request_failures_total{{{lab},status="{s}"}} {n}'
                    for s, n in sorted(self.failures.items())
                ),
                "# TYPE xmge_samples_total counter",
                f"xmge_samples_total{{{lab}}} {self.samples}",
                "# TYPE xmge_padded_samples_total counter",
                f"xmge_padded_samples_total{{{lab}}} {self.padded_samples}",
                "# TYPE xmge_batches_total counter",
                *(
                    f'xmge_batches_total{{{lab},batch_size="{b}"}} {n}'
                    for b, n in sorted(self.batch_samples.items())
                ),
                "# TYPE xmge_request_latency_seconds histogram",
            ]
            acc = 0
            for bound, n in zip((*LATENCY_BUCKETS, math.inf), self.latency_buckets, strict=True):
                acc += n
                le = "+Inf" if bound == math.inf else repr(bound)
                lines.append(f'xmge_request_latency_seconds_bucket{{{lab},le="{le}"}} {acc}')
            lines.append(f"xmge_request_latency_seconds_sum{{{lab}}} {self.latency_sum:.6f}")
            lines.append(f"xmge_request_latency_seconds_count{{{lab}}} {self.requests}")
        return "\n".join(lines) + "\n"


class BatchRunner:
    """Runs lists of validated requests on a :class:`ServedModel`: the requests' samples are
    concatenated, shared out among ``workers`` concurrent runs, cut into runs of at most the largest
    batch size, each run padded with zeros up to the smallest compiled batch size that holds it, and
    the outputs split back per request.

    ``workers > 1`` runs parts of one batch at the same time (the compiled model is reentrant), each
    on the model's own thread count: on a small machine, two one-thread runs of half a batch keep
    both cores busy without the per-layer barriers that one two-thread run waits on."""

    def __init__(self, model: ServedModel, metrics: Metrics | None = None, workers: int = 1) -> None:
        if workers < 1:
            raise ServingError(f"workers must be >= 1, got {workers}")
        self.model = model
        self.metrics = metrics or Metrics()
        self.workers = workers
        self._pool = (
            concurrent.futures.ThreadPoolExecutor(workers - 1, thread_name_prefix="xmge-part")
            if workers > 1
            else None
        )

    def plan(self, total: int) -> list[tuple[int, int]]:
        """(samples used, compiled batch size) of each run for ``total`` samples: full runs of the
        largest size, then the rest padded up to the smallest size that holds it."""
        sizes = self.model.batch_sizes
        largest = sizes[-1]
        runs = [(largest, largest)] * (total // largest)
        rest = total % largest
        if rest:
            # one padded run, not several smaller ones: a batch run costs less than its samples alone
            runs.append((rest, next(b for b in sizes if b >= rest)))
        return runs

    def shares(self, total: int) -> list[int]:
        """The samples each concurrent worker runs: as even as the batch allows, none empty."""
        parts = min(self.workers, total)
        return [total // parts + (k < total % parts) for k in range(parts)]

    def _run_share(self, columns: Sequence[np.ndarray], wide: bool = False) -> list[np.ndarray]:
        """The outputs for the samples of ``columns`` (one array per model input), run in as many
        compiled-size runs as :meth:`plan` says; ``wide``: on the instance that uses every worker's
        threads, if the model has one."""
        runners = self.model.wide_runners if wide and self.model.wide_runners else self.model.runners
        pieces: list[list[np.ndarray]] = [[] for _ in self.model.outputs]
        start = 0
        for used, size in self.plan(len(columns[0])):
            batch = [c[start : start + used] for c in columns]
            if used < size:
                batch = [np.concatenate([b, np.zeros((size - used, *b.shape[1:]), b.dtype)]) for b in batch]
            try:
                outs = list(runners[size](batch))
            except XmgeError as exc:
                raise ModelFailure(f"model {self.model.name!r} failed on a batch of {size}: {exc}") from None
            except Exception as exc:  # noqa: BLE001 - any failure of the model is the model's 5xx
                raise ModelFailure(
                    f"model {self.model.name!r} failed on a batch of {size}: {type(exc).__name__}: {exc}"
                ) from None
            if len(outs) != len(pieces):
                raise ModelFailure(
                    f"model {self.model.name!r} returned {len(outs)} outputs, not {len(pieces)}"
                )
            for k, o in enumerate(outs):
                pieces[k].append(np.asarray(o)[:used])
            self.metrics.observe_run(size, used)
            start += used
        return [np.concatenate(p) for p in pieces]

    def run(self, requests: Sequence[Request]) -> list[list[np.ndarray]]:
        """The outputs of each request (one array per model output, leading axis its samples)."""
        if not requests:
            return []
        total = sum(r.samples for r in requests)
        columns = [np.concatenate([r.arrays[i] for r in requests]) for i in range(len(self.model.inputs))]
        bounds = np.cumsum([0, *self.shares(total)])
        parts = [[c[a:b] for c in columns] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        if self._pool is None or len(parts) == 1:
            shares = [self._run_share(p, wide=self.workers > 1) for p in parts]
        else:
            # the last share runs on the calling thread: one pool thread fewer to wake
            futures = [self._pool.submit(self._run_share, p) for p in parts[:-1]]
            try:
                last = self._run_share(parts[-1])
            finally:
                # never leave a share running past the call, whichever share failed
                concurrent.futures.wait(futures)
            shares = [f.result() for f in futures] + [last]
        merged = [np.concatenate([s[k] for s in shares]) for k in range(len(self.model.outputs))]
        results = []
        start = 0
        for r in requests:
            outs = [m[start : start + r.samples] for m in merged]
            results.append([o[0] for o in outs] if r.squeezed else outs)
            start += r.samples
        return results

    def answer(self, request: Request, outputs: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        return {spec.name: o for spec, o in zip(self.model.outputs, outputs, strict=True)}


def encode_json(outputs: dict[str, np.ndarray]) -> bytes:
    return json.dumps({"outputs": {k: v.tolist() for k, v in outputs.items()}}).encode()


def encode_npz(outputs: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **outputs)
    return buf.getvalue()


# ----------------------------------------------------------------------------------------------
# Ray Serve


@dataclass(frozen=True)
class ServeOptions:
    """How a model is served (the ``xmge serve`` flags)."""

    name: str | None = None
    replicas: int = 1
    max_batch: int = 8
    batch_wait_ms: float = 5.0
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    threads: int = 1
    workers: int = 1  # concurrent runs per replica, each on ``threads`` threads
    # requests a replica holds at once (queued for a batch or running); more wait in Ray's router,
    # which polls full replicas with a back-off: a bound below the clients' concurrency costs seconds
    max_ongoing: int = 256
    target: str | None = None
    max_request_samples: int = 64
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    replica_cpus: float = 0.0  # Ray CPUs reserved per replica (0: replicas share the node freely)

    def __post_init__(self) -> None:
        for key in (
            "replicas",
            "max_batch",
            "threads",
            "workers",
            "max_ongoing",
            "max_request_samples",
            "max_body_bytes",
        ):
            if getattr(self, key) < 1:
                raise ServingError(f"{key} must be >= 1, got {getattr(self, key)}")
        if self.batch_wait_ms < 0:
            raise ServingError(f"batch_wait_ms must be >= 0, got {self.batch_wait_ms}")
        if not self.batch_sizes or min(self.batch_sizes) < 1:
            raise ServingError(f"batch sizes must be >= 1, got {list(self.batch_sizes)}")


def _ray() -> tuple[Any, Any]:
    try:
        import ray
        from ray import serve
    except ImportError as exc:
        raise ServingError(
            f"serving needs Ray Serve (pip install 'ray[serve]', or the project's 'serve' extra): {exc}"
        ) from None
    return ray, serve


def deployment(source: str | os.PathLike[str], options: ServeOptions = ServeOptions()) -> Any:
    """The Ray Serve application serving ``source`` (a package folder, ``.mge`` or ``.onnx``): bind it
    with ``serve.run(app, route_prefix=...)``, or use :func:`run`."""
    _, serve = _ray()
    source = os.path.abspath(os.fspath(source))

    @serve.deployment(
        num_replicas=options.replicas,
        ray_actor_options={"num_cpus": options.replica_cpus, "runtime_env": {"env_vars": _replica_env()}},
        max_ongoing_requests=options.max_ongoing,
        health_check_period_s=5,
    )
    class XmgeModel:
        def __init__(self) -> None:
            self.model = load_served_model(
                source,
                batch_sizes=options.batch_sizes,
                target=options.target,
                threads=options.threads,
                workers=options.workers,
                name=options.name,
            )
            self.metrics = Metrics()
            self.runner = BatchRunner(self.model, self.metrics, workers=options.workers)
            self.executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="xmge-run")
            self._run_batch.set_max_batch_size(options.max_batch)
            self._run_batch.set_batch_wait_timeout_s(options.batch_wait_ms / 1e3)
            self.ray_metrics = _ray_metrics(self.model.name)
            self.in_flight = 0  # requests between validation and answer (the event loop's thread only)

        async def _batched(self, req: Request) -> Any:
            # a lone request does not wait for company that is not coming: the batch wait applies
            # only while other requests are in flight (then they fill the batch)
            self.in_flight += 1
            self._run_batch.set_batch_wait_timeout_s(batch_wait_s(self.in_flight, options.batch_wait_ms))
            try:
                return await self._run_batch(req)
            finally:
                self.in_flight -= 1

        def check_health(self) -> None:
            if not self.model.runners:
                raise ServingError("no model loaded")

        @serve.batch(
            max_batch_size=8, batch_wait_timeout_s=0.005, batch_size_fn=lambda rs: sum(r.samples for r in rs)
        )
        async def _run_batch(self, requests: list[Request]) -> list[Any]:
            # on a worker thread: the model's run releases the GIL, so the replica's event loop goes
            # on reading and validating the requests that form the next batch
            loop = asyncio.get_running_loop()
            try:
                outs = await loop.run_in_executor(self.executor, self.runner.run, requests)
            except ModelFailure as exc:
                return [exc] * len(requests)
            if self.ray_metrics is not None:
                self.ray_metrics[1].observe(sum(r.samples for r in requests))
            return outs

        async def infer(self, feeds: dict[str, Any]) -> dict[str, np.ndarray]:
            """In-cluster calls: input name -> array in, output name -> array out."""
            t0 = time.perf_counter()
            status = 200
            try:
                req = validate(self.model, feeds, max_samples=options.max_request_samples)
                got = await self._batched(req)
                if isinstance(got, Exception):
                    status = 500
                    raise got
                return self.runner.answer(req, got)
            except RequestError as exc:
                status = exc.status
                raise
            finally:
                self._observe(t0, status)

        async def __call__(self, request: Any) -> Any:
            from starlette.responses import JSONResponse, PlainTextResponse, Response

            path = request.url.path.rstrip("/")
            if request.method == "GET":
                if path.endswith("/metrics"):
                    return PlainTextResponse(self.metrics.prometheus(self.model.name))
                return JSONResponse(self.model.describe())
            t0 = time.perf_counter()
            status = 200
            try:
                body = await request.body()
                req = parse_body(
                    self.model,
                    body,
                    request.headers.get("content-type", ""),
                    max_samples=options.max_request_samples,
                    max_bytes=options.max_body_bytes,
                )
                got = await self._batched(req)
                if isinstance(got, ModelFailure):
                    status = 500
                    return JSONResponse({"error": str(got)}, status_code=500)
                outs = self.runner.answer(req, got)
                if req.binary:
                    return Response(encode_npz(outs), media_type="application/x-npz")
                return Response(encode_json(outs), media_type="application/json")
            except RequestError as exc:
                status = exc.status
                return JSONResponse({"error": str(exc)}, status_code=exc.status)
            finally:
                self._observe(t0, status)

        def _observe(self, t0: float, status: int) -> None:
            seconds = time.perf_counter() - t0
            self.metrics.observe_request(seconds, status)
            if self.ray_metrics is not None:
                self.ray_metrics[0].observe(seconds)

    return XmgeModel.bind()


def batch_wait_s(in_flight: int, batch_wait_ms: float) -> float:
    """How long a batch waits to fill, in seconds, when ``in_flight`` requests (this one included)
    are in the replica: not at all for a lone request, else the configured wait."""
    return 0.0 if in_flight <= 1 else batch_wait_ms / 1e3


def _replica_env() -> dict[str, str]:
    """The replicas' thread settings: worker threads sleep between runs instead of spinning, so they
    leave the cores to Ray's proxy and the replica's event loop, which read the next requests (spinning
    threads starve them on a small machine): ``XMGE_SPIN_US`` for the runtime's thread pool,
    ``OMP_WAIT_POLICY`` for libgomp builds (``XMGE_LIBGOMP=1``). A value set in this process's
    environment wins."""
    return {
        "XMGE_SPIN_US": os.environ.get("XMGE_SPIN_US", "0"),
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE"),
    }


def _ray_metrics(model: str) -> tuple[Any, Any] | None:
    """Ray's own metrics (exported on the node's Prometheus endpoint), where Ray has them."""
    try:
        from ray.serve import metrics as ray_metrics
    except ImportError:
        return None
    latency = ray_metrics.Histogram(
        "xmge_request_latency_s",
        description="xmge request latency",
        boundaries=list(LATENCY_BUCKETS),
        tag_keys=("model",),
    )
    latency.set_default_tags({"model": model})
    batch = ray_metrics.Histogram(
        "xmge_batch_samples",
        description="samples per model run",
        boundaries=[1, 2, 4, 8, 16, 32, 64],
        tag_keys=("model",),
    )
    batch.set_default_tags({"model": model})
    return latency, batch


def run(
    source: str | os.PathLike[str],
    options: ServeOptions = ServeOptions(),
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    address: str | None = None,
) -> Any:
    """Deploy ``source`` on Ray Serve (starting a local Ray instance unless ``address`` names a running
    cluster, e.g. ``"auto"`` after ``ray start --head``) and return the deployment's handle. HTTP
    requests go to ``http://HOST:PORT/<name>``."""
    ray, serve = _ray()
    path = os.fspath(source)
    if not (os.path.isdir(path) or os.path.isfile(path)):
        raise ServingError(f"{path}: no such model file or package folder")
    name = options.name or source_name(source)
    options = ServeOptions(**{**options.__dict__, "name": name})
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if address is not None:
            kwargs["address"] = address
        ray.init(**kwargs)
    serve.start(http_options={"host": host, "port": port})
    return serve.run(deployment(source, options), name=name, route_prefix=f"/{name}")


def source_name(source: str | os.PathLike[str]) -> str:
    path = os.fspath(source).rstrip("/")
    if os.path.isdir(path):
        manifest = os.path.join(path, "model.json")
        if os.path.isfile(manifest):
            try:
                with open(manifest) as f:
                    got = json.load(f).get("name")
                if isinstance(got, str) and got:
                    return _identifier(got)
            except (OSError, ValueError):
                pass
    return _identifier(os.path.splitext(os.path.basename(path))[0])


def shutdown() -> None:
    """Stop Serve and the Ray instance this process started (tests and ``xmge serve`` on exit)."""
    ray, serve = _ray()
    if ray.is_initialized():
        try:
            serve.shutdown()
        finally:
            ray.shutdown()


__all__ = [
    "BatchRunner",
    "ModelFailure",
    "RequestError",
    "ServeOptions",
    "ServedModel",
    "ServingError",
    "TensorSpec",
    "deployment",
    "load_served_model",
    "parse_body",
    "run",
    "served_from_compiled",
    "source_name",
    "shutdown",
    "validate",
]

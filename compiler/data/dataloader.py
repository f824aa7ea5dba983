"""``DataLoader``: sampler -> dataset -> transform -> collator, serially or in worker processes.

With ``num_workers > 0`` each worker is a forked process that receives batches of indices (map
datasets) or raw samples / batch requests (stream datasets) and sends back collated batches; the
main process hands out work round-robin, keeps ``2 * num_workers`` batches in flight and returns
them in order. A worker's exception comes back as a ``RuntimeError`` ("Caught <Error> in
DataLoader worker process <i>", with the worker's traceback); a worker that dies is reported
("DataLoader worker ... exited unexpectedly"); waiting longer than ``timeout`` seconds for one batch
is a ``RuntimeError`` naming the timeout. ``preload`` converts each batch (nested lists, tuples,
dicts) to :class:`~compiler.Tensor` one batch ahead of the consumer.

Worker processes are forked (the dataset, transform and collator are inherited, not pickled), so
the parallel loader needs a platform with ``fork``; elsewhere it runs serially with a warning.
"""

from __future__ import annotations

import collections.abc
import itertools
import multiprocessing
import queue
import random
import threading
import time
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from compiler.data.collator import Collator
from compiler.data.dataset import Dataset, StreamDataset
from compiler.data.sampler import MapSampler, Sampler, SequentialSampler, StreamSampler
from compiler.data.transform import CudaTransform, PseudoTransform, Transform

__all__ = ["DataLoader", "get_worker_info"]

# how often the main process wakes up while waiting, to notice dead workers
_POLL_S = 0.2


def _timeout_error(timeout: float) -> RuntimeError:
    return RuntimeError(f"dataloader timeout: no batch within {timeout} s")


class WorkerInfo:
    """What a worker process knows about itself: ``idx`` (0-based), ``worker`` (the number of
    workers) and ``seed`` (its random seed). Read-only."""

    __slots__ = ("idx", "worker", "seed")

    def __init__(self, idx: int, worker: int, seed: int) -> None:
        object.__setattr__(self, "idx", idx)
        object.__setattr__(self, "worker", worker)
        object.__setattr__(self, "seed", seed)

    def __setattr__(self, key: str, value: Any) -> None:
        raise RuntimeError(f"WorkerInfo is read-only (cannot set {key!r})")

    def __repr__(self) -> str:
        return f"WorkerInfo(idx={self.idx}, worker={self.worker}, seed={self.seed})"


_worker_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """In a DataLoader worker process, its :class:`WorkerInfo`; ``None`` in the main process."""
    return _worker_info


class DataLoader:
    """Iterates batches of ``dataset``.

    ``sampler`` defaults to a :class:`SequentialSampler` of batch size 1 (a :class:`StreamSampler`
    for a :class:`StreamDataset`); ``transform`` to the identity; ``collator`` to :class:`Collator`.
    ``num_workers`` worker processes load batches in parallel (0: in this process); ``timeout``
    (seconds, 0 = wait forever) bounds the wait for one batch; ``preload`` yields Tensors instead
    of numpy arrays, converted one batch ahead; ``parallel_stream`` makes each worker read its own
    iterator of a stream dataset (see :func:`get_worker_info`) instead of the main process
    reading the stream and the workers only transforming it."""

    def __init__(
        self,
        dataset: Dataset,
        sampler: Sampler | None = None,
        transform: Transform | None = None,
        collator: Collator | None = None,
        num_workers: int = 0,
        timeout: float = 0,
        preload: bool = False,
        parallel_stream: bool = False,
    ) -> None:
        if num_workers < 0:
            raise ValueError(f"DataLoader: num_workers must not be negative, got {num_workers}")
        if timeout < 0:
            raise ValueError(f"DataLoader: timeout must not be negative, got {timeout}")
        self.dataset = dataset
        self.num_workers = num_workers
        self.timeout = timeout
        self.preload = preload
        self.parallel_stream = parallel_stream
        if isinstance(dataset, StreamDataset):
            self.sampler = sampler if sampler is not None else StreamSampler(batch_size=1)
            if not isinstance(self.sampler, StreamSampler):
                raise TypeError(
                    f"DataLoader: a StreamDataset needs a StreamSampler, got {type(self.sampler).__name__}"
                )
            self.datakind = "stream"
        else:
            if not isinstance(dataset, Dataset):
                raise TypeError(
                    f"DataLoader: dataset must be a data.dataset.Dataset, got {type(dataset).__name__}"
                )
            self.sampler = sampler if sampler is not None else SequentialSampler(dataset, batch_size=1)
            if not isinstance(self.sampler, MapSampler):
                raise TypeError(
                    f"DataLoader: a map-style Dataset needs a MapSampler, got {type(self.sampler).__name__}"
                )
            self.datakind = "map"
        self.transform = transform if transform is not None else PseudoTransform()
        self.collator = collator if collator is not None else Collator()

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self) -> Iterator[Any]:
        workers = self.num_workers
        if workers and "fork" not in multiprocessing.get_all_start_methods():
            warnings.warn("DataLoader: worker processes need fork; loading serially", stacklevel=2)
            workers = 0
        batches: Iterator[Any]
        if workers:
            batches = _ParallelIter(self, workers)
        elif self.datakind == "map":
            batches = _serial_map(self)
        else:
            batches = _serial_stream(self)
        return _preloaded(batches) if self.preload else batches


def _to_tensor(batch: Any) -> Any:
    from compiler.tensor import Tensor

    if isinstance(batch, np.ndarray):
        return Tensor(batch)
    if isinstance(batch, collections.abc.Mapping):
        return {k: _to_tensor(v) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(_to_tensor(v) for v in batch))
    if isinstance(batch, (list, tuple)):
        return [_to_tensor(v) for v in batch]
    return batch


def _preloaded(batches: Iterator[Any]) -> Iterator[Any]:
    ahead = _to_tensor(next(batches, _END))
    while ahead is not _END:
        current, ahead = ahead, _END
        ahead = _to_tensor(next(batches, _END))
        yield current


_END: Any = object()


def _serial_map(loader: DataLoader) -> Iterator[Any]:
    for indices in loader.sampler:
        samples = [loader.dataset[i] for i in indices]
        yield loader.collator.apply(list(loader.transform.apply_batch(samples)))


class _TimedStream:
    """``next()`` of a stream iterator that gives up after ``timeout`` seconds: the iterator runs
    in a daemon thread, so a stream blocked forever does not block the caller."""

    def __init__(self, source: Iterator[Any], timeout: float) -> None:
        self._source = source
        self._timeout = timeout
        self._requests: queue.Queue[None] = queue.Queue()
        self._results: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while True:
            self._requests.get()
            try:
                self._results.put(("item", next(self._source)))
            except BaseException as err:  # noqa: BLE001 - handed to the consumer
                self._results.put(("error", err))

    def next(self) -> Any:
        if self._timeout <= 0:
            return next(self._source)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True, name="xmge-stream-reader")
            self._thread.start()
        self._requests.put(None)
        try:
            kind, value = self._results.get(timeout=self._timeout)
        except queue.Empty:
            raise _timeout_error(self._timeout) from None
        if kind == "error":
            raise value
        return value


def _next_sample(stream: _TimedStream) -> Any:
    try:
        return stream.next()
    except RuntimeError as err:
        # a generator that raises StopIteration itself surfaces as RuntimeError (PEP 479)
        if isinstance(err.__cause__, StopIteration):
            raise StopIteration from None
        raise


def _serial_stream(loader: DataLoader) -> Iterator[Any]:
    stream = _TimedStream(iter(loader.dataset), loader.timeout)
    size = loader.sampler.batch_size
    while True:
        samples = []
        try:
            while len(samples) < size:
                samples.append(loader.transform.apply(_next_sample(stream)))
        except StopIteration:
            if not samples:
                return
        yield loader.collator.apply(samples)


@dataclass
class _Failure:
    """A worker's exception, sent back as text (the exception itself may not pickle)."""

    kind: str
    worker: int
    text: str

    def error(self) -> RuntimeError:
        return RuntimeError(
            f"Caught {self.kind} in DataLoader worker process {self.worker}.\nOriginal {self.text}"
        )


# a worker's answer when its stream is exhausted
_EXHAUSTED = "exhausted"


def _worker_main(
    loader: DataLoader, worker_id: int, workers: int, seed: int, tasks: Any, results: Any
) -> None:
    global _worker_info
    _worker_info = WorkerInfo(worker_id, workers, seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    transform, collator = loader.transform, loader.collator
    per_batch = not isinstance(transform, CudaTransform)
    stream = iter(loader.dataset) if loader.datakind == "stream" and loader.parallel_stream else None
    while True:
        task = tasks.get()
        if task is None:
            return
        index, payload = task
        try:
            if loader.datakind == "map":
                samples = [loader.dataset[i] for i in payload]
                if per_batch:
                    samples = list(transform.apply_batch(samples))
            else:
                if stream is not None:  # payload: the sampler's batch of counts
                    samples = []
                    for _ in payload:
                        try:
                            samples.append(next(stream))
                        except (StopIteration, RuntimeError) as err:
                            if isinstance(err, RuntimeError) and not isinstance(err.__cause__, StopIteration):
                                raise
                            break
                    if not samples:
                        results.put((index, _EXHAUSTED))
                        continue
                else:  # payload: raw samples read by the main process
                    samples = list(payload)
                if per_batch:
                    samples = [transform.apply(s) for s in samples]
            results.put((index, collator.apply(samples)))
        except Exception as err:  # noqa: BLE001 - sent to the main process
            results.put((index, _Failure(type(err).__name__, worker_id, traceback.format_exc())))


class _ParallelIter:
    def __init__(self, loader: DataLoader, workers: int) -> None:
        self.loader = loader
        self.workers = workers
        ctx = multiprocessing.get_context("fork")
        self._results = ctx.Queue()
        self._tasks = [ctx.Queue() for _ in range(workers)]
        base = int(np.random.default_rng().integers(2**31))
        self._procs = [
            ctx.Process(
                target=_worker_main,
                args=(loader, i, workers, base + i, self._tasks[i], self._results),
                daemon=True,
                name=f"xmge-dataloader-{i}",
            )
            for i in range(workers)
        ]
        self._alive = [True] * workers
        self._closed = False
        for p in self._procs:
            p.start()
        self._cycle = itertools.cycle(range(workers))
        self._owner: dict[int, int] = {}
        self._ready: dict[int, Any] = {}
        self._sent = 0
        self._next = 0
        self._source_done = False
        self._batches = iter(loader.sampler)
        self._stream = (
            _TimedStream(iter(loader.dataset), loader.timeout)
            if loader.datakind == "stream" and not loader.parallel_stream
            else None
        )
        try:
            for _ in range(2 * workers):
                self._send()
        except BaseException:
            self.close()
            raise

    def _payload(self) -> Any:
        if self._stream is None:
            return next(self._batches)
        samples = []
        try:
            for _ in range(self.loader.sampler.batch_size):
                samples.append(_next_sample(self._stream))
        except StopIteration:
            if not samples:
                raise
        return samples

    def _send(self) -> None:
        if self._source_done:
            return
        live = [w for w in range(self.workers) if self._alive[w]]
        if not live:
            self._source_done = True
            return
        try:
            payload = self._payload()
        except StopIteration:
            self._source_done = True
            return
        worker = next(self._cycle)
        while not self._alive[worker]:
            worker = next(self._cycle)
        self._tasks[worker].put((self._sent, payload))
        self._owner[self._sent] = worker
        self._sent += 1

    def __iter__(self) -> _ParallelIter:
        return self

    def __next__(self) -> Any:
        try:
            return self._next_batch()
        except BaseException:
            self.close()
            raise

    def _next_batch(self) -> Any:
        while True:
            if self._next >= self._sent:
                self.close()
                raise StopIteration
            if self._next in self._ready:
                data = self._ready.pop(self._next)
                self._owner.pop(self._next, None)
                self._next += 1
                if isinstance(data, str) and data == _EXHAUSTED:
                    continue
                self._send()
                if isinstance(self.loader.transform, CudaTransform):
                    data = self.loader.transform.apply(data)
                return data
            index, data = self._receive()
            if index < self._next:  # a late answer for a batch already skipped as exhausted
                continue
            if isinstance(data, _Failure):
                raise data.error()
            if isinstance(data, str) and data == _EXHAUSTED:
                self._alive[self._owner[index]] = False
                for pending, owner in list(self._owner.items()):
                    if owner == self._owner[index] and pending not in self._ready and pending != index:
                        self._ready[pending] = _EXHAUSTED
            self._ready[index] = data

    def _receive(self) -> tuple[int, Any]:
        start = time.monotonic()
        timeout = self.loader.timeout
        while True:
            wait = _POLL_S if timeout <= 0 else min(_POLL_S, max(0.0, start + timeout - time.monotonic()))
            try:
                return self._results.get(timeout=wait)
            except queue.Empty:
                pass
            dead = [(i, p) for i, p in enumerate(self._procs) if not p.is_alive()]
            if dead:
                ids = ", ".join(str(i) for i, _ in dead)
                pids = ", ".join(str(p.pid) for _, p in dead)
                codes = ", ".join(str(p.exitcode) for _, p in dead)
                raise RuntimeError(
                    f"DataLoader worker (worker(s): {ids}, pid(s): {pids}) exited unexpectedly, "
                    f"exitcode(s): {codes}"
                )
            if timeout > 0 and time.monotonic() - start >= timeout:
                raise _timeout_error(timeout)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for q in self._tasks:
            try:
                q.put(None)
            except (OSError, ValueError):
                pass
        for p in self._procs:
            p.join(timeout=0.5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=1.0)
        for q in (*self._tasks, self._results):
            q.cancel_join_thread()
            q.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

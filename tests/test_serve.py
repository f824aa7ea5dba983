"""Serving compiled models: request validation, dynamic batching (concatenate, pad, split) against
single-sample runs and the reference interpreter, and the Ray Serve deployment over HTTP and its
Python handle (4xx for bad requests, 5xx for a model failure, the replica staying up)."""

from __future__ import annotations

import concurrent.futures
import io
import json
import os
import socket
import time
import urllib.error
import urllib.request
from typing import Any

import numpy as np
import pytest

import compiler as xm
import compiler.functional as F
from compiler import jit, serving
from compiler.hub.convnet import ConvNet
from compiler.lite import Network

BATCH_SIZES = (1, 2, 4)


def _dump(fn: Any, names: list[str]) -> bytes:
    buf = io.BytesIO()
    fn.dump(buf, arg_names=names)
    return buf.getvalue()


@pytest.fixture(scope="module")
def convnet_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    net = ConvNet()
    net.eval()

    @jit.trace(symbolic=True, capture_as_const=True)
    def f(data: Any) -> Any:
        return net(data)

    f(xm.tensor(np.zeros((1, 1, 28, 28), np.float32)))
    path = tmp_path_factory.mktemp("serve") / "convnet.mge"
    path.write_bytes(_dump(f, ["data"]))
    return str(path)


@pytest.fixture(scope="module")
def picker_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A model whose integer input indexes its float input: an index out of range makes the compiled
    model's run fail (a 5xx), whatever the request's validation saw."""

    @jit.trace(symbolic=True, capture_as_const=True)
    def g(x: Any, idx: Any) -> Any:
        return F.indexing_one_hot(x, idx, 1) * 2

    g(xm.tensor(np.zeros((1, 6), np.float32)), xm.tensor(np.zeros((1,), np.int32)))
    path = tmp_path_factory.mktemp("serve") / "picker.mge"
    path.write_bytes(_dump(g, ["x", "idx"]))
    return str(path)


@pytest.fixture(scope="module")
def convnet_package(convnet_file: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    from compiler.driver.compile import compile

    out = tmp_path_factory.mktemp("serve") / "convnet_pkg"
    compile(convnet_file, None, batch_sizes=BATCH_SIZES, name="convnet").save(out)
    return str(out)


@pytest.fixture(scope="module")
def served(convnet_file: str) -> serving.ServedModel:
    return serving.load_served_model(convnet_file, batch_sizes=BATCH_SIZES)


def _samples(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 1, 28, 28)).astype(np.float32)


def _reference(path: str, x: np.ndarray) -> np.ndarray:
    """The reference interpreter's answer for the samples ``x`` (one at a time)."""
    net = Network(path)
    return np.concatenate([next(iter(net(data=x[i : i + 1]).values())) for i in range(len(x))])


# ----------------------------------------------------------------------------------------------
# Without Ray


def test_served_model_describes_batch_axis(served: serving.ServedModel) -> None:
    d = served.describe()
    assert d["batch_sizes"] == [1, 2, 4]
    assert d["inputs"] == [{"name": "data", "shape": ["batch", 1, 28, 28], "dtype": "float32"}]
    assert d["outputs"][0]["shape"] == ["batch", 10]


def test_a_package_serves_the_batch_sizes_it_holds(convnet_package: str, convnet_file: str) -> None:
    model = serving.load_served_model(convnet_package, batch_sizes=(99,))  # a package's own sizes win
    assert model.batch_sizes == [1, 2, 4] and model.name == "convnet"
    x = _samples(3, 11)
    (out,) = serving.BatchRunner(model).run([serving.validate(model, {"data": x}, max_samples=8)])
    np.testing.assert_allclose(out[0], _reference(convnet_file, x), rtol=1e-4, atol=1e-4)


def test_plan_pads_the_rest_to_the_smallest_size_that_holds_it(served: serving.ServedModel) -> None:
    runner = serving.BatchRunner(served)
    assert runner.plan(1) == [(1, 1)]
    assert runner.plan(3) == [(3, 4)]
    assert runner.plan(4) == [(4, 4)]
    assert runner.plan(9) == [(4, 4), (4, 4), (1, 1)]
    assert runner.plan(7) == [(4, 4), (3, 4)]


def test_batches_concatenate_pad_and_split(served: serving.ServedModel, convnet_file: str) -> None:
    sizes = [1, 2, 3, 1]
    xs = [_samples(n, seed) for seed, n in enumerate(sizes)]
    reqs = [serving.validate(served, {"data": x}, max_samples=8) for x in xs[:3]]
    reqs.append(serving.validate(served, {"data": xs[3][0]}, max_samples=8))  # one sample, no batch axis
    runner = serving.BatchRunner(served)
    got = runner.run(reqs)
    assert [g[0].shape for g in got] == [(1, 10), (2, 10), (3, 10), (10,)]
    single = served.runners[1]
    for x, (out,) in zip(xs, got, strict=True):
        want = np.concatenate([single([x[i : i + 1]])[0] for i in range(len(x))])
        np.testing.assert_allclose(out.reshape(want.shape), want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out.reshape(want.shape), _reference(convnet_file, x), rtol=1e-4, atol=1e-4)
    # 7 samples: a full batch of 4, then 3 padded to 4
    assert runner.metrics.batch_samples == {4: 2}
    assert runner.metrics.padded_samples == 1
    assert runner.metrics.samples == 7


def test_workers_share_a_batch_and_agree_with_one_run(convnet_file: str) -> None:
    """Two workers run halves of a batch at once on one-thread instances; a batch of one runs on the
    instance that has every worker's threads. Answers equal the one-worker runner's and the
    reference's, and every sample is counted once."""
    model = serving.load_served_model(convnet_file, batch_sizes=BATCH_SIZES, threads=1, workers=2)
    assert sorted(model.wide_runners) == [1, 2, 4]
    assert model.wide_runners[1].__self__.threads == 2  # type: ignore[attr-defined]
    runner = serving.BatchRunner(model, workers=2)
    assert runner.shares(1) == [1] and runner.shares(3) == [2, 1] and runner.shares(8) == [4, 4]
    xs = [_samples(n, 40 + n) for n in (1, 2, 4)]
    got = runner.run([serving.validate(model, {"data": x}, max_samples=8) for x in xs])
    one = serving.BatchRunner(model).run([serving.validate(model, {"data": x}, max_samples=8) for x in xs])
    for x, (a,), (b,) in zip(xs, got, one, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, _reference(convnet_file, x), rtol=1e-4, atol=1e-4)
    # 7 samples in two concurrent shares of 4 and 3 (padded to 4)
    assert runner.metrics.batch_samples == {4: 2} and runner.metrics.samples == 7
    (single,) = runner.run([serving.validate(model, {"data": xs[0]}, max_samples=8)])
    np.testing.assert_array_equal(single[0], one[0][0])
    with pytest.raises(serving.ServingError, match="workers must be >= 1"):
        serving.BatchRunner(model, workers=0)


def test_a_failing_share_fails_the_batch_after_every_share_ends(picker_file: str) -> None:
    model = serving.load_served_model(picker_file, batch_sizes=(1, 2), workers=2)
    runner = serving.BatchRunner(model, workers=2)
    x = np.zeros((3, 6), np.float32)
    bad = serving.validate(model, {"x": x, "idx": np.array([0, 1, 9], np.int32)}, max_samples=8)
    with pytest.raises(serving.ModelFailure, match="picker"):
        runner.run([bad])
    good = serving.validate(model, {"x": x + 1, "idx": np.array([0, 1, 2], np.int32)}, max_samples=8)
    (out,) = runner.run([good])
    np.testing.assert_array_equal(out[0], np.full(3, 2, np.float32))


@pytest.mark.parametrize(
    ("feeds", "status", "message"),
    [
        ({"image": [[0.0]]}, 400, "unknown input(s) ['image']"),
        ({}, 400, "missing input(s) ['data']"),
        ({"data": np.zeros((2, 1, 28, 27))}, 400, "is neither one sample [1, 28, 28] nor a batch"),
        ({"data": [["a"]]}, 400, "not an array of numbers"),
        ({"data": [[1.0], [1.0, 2.0]]}, 400, "not a rectangular array"),
        ({"data": np.zeros((9, 1, 28, 28))}, 413, "9 samples in one request; at most 8"),
        ({"data": np.zeros((0, 1, 28, 28))}, 400, "no samples"),
    ],
)
def test_bad_requests_are_refused_in_one_line(
    served: serving.ServedModel, feeds: dict[str, Any], status: int, message: str
) -> None:
    with pytest.raises(serving.RequestError) as err:
        serving.validate(served, feeds, max_samples=8)
    assert err.value.status == status
    assert message in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("body", "content_type", "status", "message"),
    [
        (b"", "application/json", 400, "empty body"),
        (b"{not json", "application/json", 400, "not valid JSON"),
        (b'{"data": [1]}', "application/json", 400, 'must be a JSON object {"inputs"'),
        (b"\x93NUMPY garbage", "application/octet-stream", 400, "not a readable .npy/.npz"),
        (b"x" * 2000, "text/plain", 413, "at most 1000 are accepted"),
        (b"hello", "text/plain", 400, "unsupported body"),
    ],
)
def test_bad_bodies_are_refused(
    served: serving.ServedModel, body: bytes, content_type: str, status: int, message: str
) -> None:
    with pytest.raises(serving.RequestError) as err:
        serving.parse_body(served, body, content_type, max_samples=8, max_bytes=1000)
    assert err.value.status == status and message in str(err.value)


def test_integer_inputs_refuse_lossy_values(picker_file: str) -> None:
    model = serving.load_served_model(picker_file, batch_sizes=(1,))
    x = np.zeros((1, 6), np.float32)
    ok = serving.validate(model, {"x": x, "idx": [3]}, max_samples=4)
    assert ok.arrays[1].dtype == np.int32
    with pytest.raises(serving.RequestError, match="non-integer values for a int32 input"):
        serving.validate(model, {"x": x, "idx": [1.5]}, max_samples=4)
    with pytest.raises(serving.RequestError, match="out of range for int32"):
        serving.validate(model, {"x": x, "idx": [2**32 + 1]}, max_samples=4)


def test_a_model_failure_names_the_model(picker_file: str) -> None:
    model = serving.load_served_model(picker_file, batch_sizes=(1,), name="picker")
    runner = serving.BatchRunner(model)
    bad = serving.validate(model, {"x": np.zeros((1, 6)), "idx": [9]}, max_samples=4)
    with pytest.raises(serving.ModelFailure, match=r"model 'picker' failed .*index 9 is out of range"):
        runner.run([bad])
    good = serving.validate(model, {"x": np.arange(6.0)[None], "idx": [4]}, max_samples=4)
    assert runner.run([good])[0][0].tolist() == [8.0]


def test_a_lone_request_does_not_wait_for_a_batch() -> None:
    assert serving.batch_wait_s(1, 10.0) == 0.0
    assert serving.batch_wait_s(2, 10.0) == pytest.approx(0.01)
    assert serving.batch_wait_s(16, 0.0) == 0.0


def test_options_are_checked() -> None:
    with pytest.raises(serving.ServingError, match="max_batch must be >= 1"):
        serving.ServeOptions(max_batch=0)
    with pytest.raises(serving.ServingError, match="max_ongoing must be >= 1"):
        serving.ServeOptions(max_ongoing=0)
    with pytest.raises(serving.ServingError, match="no such model file or package folder"):
        serving.load_served_model("/nonexistent/model.mge")


# ----------------------------------------------------------------------------------------------
# On Ray Serve


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _post(url: str, body: bytes, content_type: str = "application/json") -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _npz(x: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, data=x)
    return buf.getvalue()


def _children(pid: int) -> set[int]:
    out: set[int] = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out.update(int(c) for c in f.read().split())
        except OSError:
            continue
    return out


@pytest.fixture(scope="module")
def ray_serve() -> Any:
    ray = pytest.importorskip("ray", reason="Ray Serve is not installed (pip install 'ray[serve]')")
    pytest.importorskip("ray.serve", reason="Ray Serve is not installed (pip install 'ray[serve]')")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    before = _children(os.getpid())
    # replicas import this checkout (not another install of xmge)
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": repo}},
    )
    port = _free_port()
    yield port
    serving.shutdown()
    deadline = time.time() + 30
    while time.time() < deadline and _children(os.getpid()) - before:
        time.sleep(0.5)
    assert not ray.is_initialized()
    assert not _children(os.getpid()) - before, "Ray left processes behind"


def test_ray_serve_batches_concurrent_requests(
    ray_serve: int, convnet_file: str, picker_file: str, convnet_package: str
) -> None:
    port = ray_serve
    options = serving.ServeOptions(name="convnet", batch_sizes=BATCH_SIZES, max_batch=4, batch_wait_ms=50)
    handle = serving.run(convnet_file, options, port=port)
    url = f"http://127.0.0.1:{port}/convnet"

    # 24 concurrent clients, one or two samples each, JSON and .npz bodies
    def call(k: int) -> tuple[np.ndarray, np.ndarray]:
        x = _samples(1 + k % 2, 100 + k)
        if k % 3 == 0:
            buf = io.BytesIO()
            np.savez(buf, data=x)
            status, body = _post(url, buf.getvalue(), "application/octet-stream")
            assert status == 200, body
            return x, np.load(io.BytesIO(body))["fc2.ADD"]
        status, body = _post(url, json.dumps({"inputs": {"data": x.tolist()}}).encode())
        assert status == 200, body
        return x, np.asarray(json.loads(body)["outputs"]["fc2.ADD"], np.float32)

    with concurrent.futures.ThreadPoolExecutor(24) as pool:
        results = list(pool.map(call, range(48)))
    for x, got in results:
        np.testing.assert_allclose(got, _reference(convnet_file, x), rtol=1e-4, atol=1e-4)

    # one sample without the batch axis comes back without it; the Python handle answers arrays
    x1 = _samples(1, 7)
    status, body = _post(url, json.dumps({"inputs": {"data": x1[0].tolist()}}).encode())
    assert status == 200 and np.asarray(json.loads(body)["outputs"]["fc2.ADD"]).shape == (10,)
    out = handle.infer.remote({"data": x1}).result()
    np.testing.assert_allclose(out["fc2.ADD"], _reference(convnet_file, x1), rtol=1e-4, atol=1e-4)

    # bad requests: 4xx with one line; the replica stays up
    status, body = _post(url, json.dumps({"inputs": {"image": [[1.0]]}}).encode())
    assert status == 400 and "unknown input(s) ['image']" in json.loads(body)["error"]
    status, body = _post(url, json.dumps({"inputs": {"data": np.zeros((65, 1, 28, 28)).tolist()}}).encode())
    assert status == 413
    status, body = _post(url, b"not an array", "text/plain")
    assert status == 400

    with urllib.request.urlopen(f"{url}/metadata", timeout=30) as resp:
        assert json.loads(resp.read())["batch_sizes"] == [1, 2, 4]
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as resp:
        metrics = resp.read().decode()
    runs = sum(
        int(line.rsplit(" ", 1)[1]) for line in metrics.splitlines() if line.startswith("xmge_batches_total{")
    )
    samples = int(
        next(line for line in metrics.splitlines() if line.startswith("xmge_samples_total")).split()[-1]
    )
    assert samples >= 72  # 48 requests of 1 or 2 samples, and the two single ones
    assert samples / runs > 1.2, f"requests were not batched ({samples} samples in {runs} runs)"
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/healthz", timeout=30) as resp:
        assert resp.status == 200

    # a saved package, loaded by the replica without compiling: 3 samples run padded to 4
    serving.run(convnet_package, serving.ServeOptions(name="packaged"), port=port)
    assert serving.source_name(convnet_package) == "convnet"  # the default name: the package's
    x3 = _samples(3, 5)
    status, body = _post(f"http://127.0.0.1:{port}/packaged", _npz(x3), "application/octet-stream")
    assert status == 200, body
    np.testing.assert_allclose(
        np.load(io.BytesIO(body))["fc2.ADD"], _reference(convnet_file, x3), rtol=1e-4, atol=1e-4
    )

    # a model failure: 500 naming the model, and the replica answers the next request
    serving.run(picker_file, serving.ServeOptions(name="picker", batch_sizes=(1,)), port=port)
    purl = f"http://127.0.0.1:{port}/picker"
    status, body = _post(purl, json.dumps({"inputs": {"x": [[0, 1, 2, 3, 4, 5]], "idx": [9]}}).encode())
    assert status == 500
    assert "model 'picker' failed" in json.loads(body)["error"] and "index 9" in json.loads(body)["error"]
    status, body = _post(purl, json.dumps({"inputs": {"x": [[0, 1, 2, 3, 4, 5]], "idx": [4]}}).encode())
    assert status == 200 and json.loads(body)["outputs"] == {next(iter(json.loads(body)["outputs"])): [8.0]}


def test_cli_serve_refuses_a_missing_model_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from compiler.driver.cli import main

    assert main(["serve", "/nonexistent/model.mge"]) != 0
    err = capsys.readouterr().err.strip()
    assert err.endswith("/nonexistent/model.mge: no such model file or package folder")
    assert "\n" not in err


@pytest.mark.slow
def test_cli_serve_answers_and_stops_on_sigterm(convnet_file: str) -> None:
    import signal
    import subprocess
    import sys

    pytest.importorskip("ray.serve", reason="Ray Serve is not installed (pip install 'ray[serve]')")
    port = _free_port()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cmd = [
        sys.executable,
        "-m",
        "compiler.driver.cli",
        "serve",
        convnet_file,
        "--port",
        str(port),
        "--workers",
        "2",
    ]
    cmd += ["--batch-sizes", "1,2", "--max-batch", "2"]
    proc = subprocess.Popen(
        cmd, cwd=repo, env={**os.environ, "PYTHONPATH": repo}, stdout=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert f"http://127.0.0.1:{port}/convnet" in line
        x = _samples(2, 3)
        status, body = _post(
            f"http://127.0.0.1:{port}/convnet", json.dumps({"inputs": {"data": x.tolist()}}).encode()
        )
        assert status == 200
        got = np.asarray(json.loads(body)["outputs"]["fc2.ADD"], np.float32)
        np.testing.assert_allclose(got, _reference(convnet_file, x), rtol=1e-4, atol=1e-4)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0

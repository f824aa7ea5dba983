"""Profiles named after the model: every kernel call carries the model's operator name through
lowering and fusion into the profiling build's table (escaped: a hostile name from a file cannot
change the C), ``xmge bench --profile`` prints those names, ``--chrome-trace`` writes them and
``--plot`` draws a per-layer latency chart (a PNG parsed back here: signature, chunk CRCs, IHDR,
the inflated scanlines, one bar per kernel call)."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import zlib
from typing import Any

import numpy as np
import pytest

from backends.c.symbols import c_string
from backends.mge.reader import read_mge
from compiler.driver.cli import main
from compiler.driver.pictures import BAR_RGB, latency_chart
from compiler.driver.targets import host_target, runs_here
from passes.target import KernelTime
from tests.conftest import data_path

CONVNET = data_path("convnet", "plain.mge")
needs_x86 = pytest.mark.skipif(not runs_here(host_target()), reason="this CPU runs no generated x86 code")


def read_png(data: bytes) -> np.ndarray:
    """An 8-bit RGB PNG's pixels, every chunk's CRC checked and every scanline filter undone (the
    five of the PNG specification, so the reader does not just mirror the writer)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "no PNG signature"
    pos, chunks = 8, []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(kind + body), f"bad CRC in {kind!r}"
        chunks.append((kind, body))
        pos += 12 + length
    assert pos == len(data) and chunks[0][0] == b"IHDR" and chunks[-1] == (b"IEND", b"")
    width, height, depth, color, comp, filt, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, color, comp, filt, interlace) == (8, 2, 0, 0, 0), "not 8-bit RGB, non-interlaced"
    raw = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))
    stride = width * 3
    assert len(raw) == height * (stride + 1)
    out = np.zeros((height, stride), np.int64)
    prev = np.zeros(stride, np.int64)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1).astype(np.int64)
        cur = line.copy() if kind == 0 else np.zeros(stride, np.int64)
        for i in range(stride if kind else 0):
            a = cur[i - 3] if i >= 3 else 0
            b, c = prev[i], (prev[i - 3] if i >= 3 else 0)
            if kind == 1:
                pred = a
            elif kind == 2:
                pred = b
            elif kind == 3:
                pred = (a + b) // 2
            else:
                assert kind == 4, f"unknown filter {kind}"
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
            cur[i] = (line[i] + pred) & 0xFF
        out[y], prev = cur, cur
    return out.reshape(height, width, 3).astype(np.uint8)


def c_literal_bytes(body: str) -> bytes:
    """The bytes a C string literal's body means; any unescaped quote is an error (it ends the
    literal early)."""
    assert re.fullmatch(r'(?:[^"\\]|\\[0-7]{1,3}|\\["\\?])*', body), body
    out = bytearray()
    for plain, octal, simple in re.findall(r"([^\\])|\\([0-7]{1,3})|\\(.)", body):
        out += plain.encode() if plain else bytes([int(octal, 8)]) if octal else simple.encode()
    return bytes(out)


def bars(pixels: np.ndarray) -> list[int]:
    """The length in pixels of every bar of a latency chart, top to bottom: runs of the bar colour
    down the first column any bar starts in."""
    is_bar = np.all(pixels == BAR_RGB, axis=2)
    x0 = int(np.argmax(is_bar.any(axis=0)))
    column = is_bar[:, x0]
    starts = [y for y in range(len(column)) if column[y] and (y == 0 or not column[y - 1])]
    return [int(np.argmin(np.append(is_bar[y, x0:], False))) for y in starts]


def test_chart_is_a_png_with_one_bar_per_call_proportional_to_its_time() -> None:
    rows = [KernelTime(f"layer{k}.conv", f"k{k}", "conv2d", ms) for k, ms in enumerate((0.5, 2.0, 0.0, 1.0))]
    pixels = read_png(latency_chart(rows, "test chart"))
    lengths = bars(pixels)
    assert len(lengths) == 4
    assert lengths[1] == max(lengths) and lengths[2] == 1  # a zero time still draws a bar
    assert lengths[0] == pytest.approx(lengths[1] / 4, abs=1)
    assert lengths[3] == pytest.approx(lengths[1] / 2, abs=1)
    with pytest.raises(ValueError, match="no kernel calls"):
        latency_chart([], "empty")


def test_c_string_means_exactly_the_names_bytes(tmp_path: Any) -> None:
    names = [
        'a"b',
        "back\\slash",
        "new\nline",
        "*/ end",
        "??=trigraph",
        "caf\u00e9 \u5c64",
        "\x001",
        "plain.name[0]",
    ]
    assert (
        c_string("layer1.0.conv1.Convolution") == '"layer1.0.conv1.Convolution"'
    )  # ordinary names unchanged
    src = tmp_path / "names.c"
    table = ", ".join(c_string(n) for n in names)
    src.write_text(
        "#include <stdio.h>\n#include <string.h>\n"
        f"static const char* names[] = {{{table}}};\n"
        f"static const unsigned long lens[] = {{{', '.join(str(len(n.encode())) for n in names)}}};\n"
        "int main(void) {\n"
        f"  for (int i = 0; i < {len(names)}; i++) {{\n"
        "    fwrite(names[i], 1, lens[i], stdout); fputc(0xff, stdout);\n  }\n  return 0;\n}\n"
    )
    exe = tmp_path / "names"
    subprocess.run(
        ["gcc", "-std=c11", "-Wall", "-Werror", "-trigraphs", str(src), "-o", str(exe)], check=True
    )
    got = subprocess.run([str(exe)], capture_output=True, check=True).stdout.split(b"\xff")[:-1]
    assert got == [n.encode() for n in names]


@needs_x86
def test_profile_keeps_hostile_operator_names_exactly() -> None:
    from xdsl.dialects.builtin import StringAttr

    from compiler.driver.compile import compile as compile_model
    from compiler.driver.compile import profile_layers

    module = read_mge(open(CONVNET, "rb").read())
    hostile = 'pool1"); system("rm -rf /"); /* \\ \n ??= caf\u00e9'
    for op in module.walk():
        if op.name == "mgb.pooling":
            op.attributes["name"] = StringAttr(hostile)
            break
    compiled = compile_model(module, host_target(), progress=False)
    x = np.load(data_path("convnet", "inputs.npz"))["data"]
    rows = profile_layers(compiled, [x], 1)
    assert hostile in [r.layer for r in rows]
    np.testing.assert_allclose(compiled(x)[0], compile_model(CONVNET, "ref")(x)[0], rtol=1e-4, atol=1e-5)


@needs_x86
def test_bench_plot_and_trace_name_the_convnets_layers(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    png, trace = tmp_path / "chart.png", tmp_path / "trace.json"
    argv = ["bench", CONVNET, "--iters", "2", "--profile", "--plot", str(png), "--chrome-trace", str(trace)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    events = json.loads(trace.read_text())["traceEvents"]
    names = [e["name"] for e in events]
    assert "conv1.ADD" in names and "fc1.MatrixMul" in names  # the .mge's operator names, not symbols
    assert all(e["args"]["kernel"] and e["args"]["family"] for e in events)
    assert "conv1.ADD" in printed and "per-layer latency chart written to" in printed
    assert len(bars(read_png(png.read_bytes()))) == len(events)


def test_plot_needs_profile(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", CONVNET, "--iters", "1", "--plot", str(tmp_path / "c.png")]) == 1
    assert "--plot needs --profile" in capsys.readouterr().err
    assert not (tmp_path / "c.png").exists()


def test_profile_of_a_package_is_refused_in_one_line(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", str(tmp_path), "--profile"]) == 1
    err = capsys.readouterr().err
    assert "--profile needs a model file, not a package" in err and len(err.splitlines()) == 1


@pytest.mark.slow
@needs_x86
def test_resnet18_profile_names_every_layer_in_the_trace_and_the_chart(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import compiler as xm
    from compiler import jit
    from compiler.hub.resnet import resnet18

    net = resnet18()
    net.eval()

    @jit.trace(symbolic=True, capture_as_const=True)
    def f(x: Any) -> Any:
        return net(x)

    f(xm.tensor(np.zeros((1, 3, 64, 64), np.float32)))
    model = tmp_path / "resnet18.mge"
    f.dump(str(model), arg_names=["data"], enable_fuse_conv_bias_nonlinearity=True)
    png, trace = tmp_path / "chart.png", tmp_path / "trace.json"
    argv = [
        "bench",
        str(model),
        "--iters",
        "2",
        "--profile",
        "--plot",
        str(png),
        "--chrome-trace",
        str(trace),
    ]
    assert main(argv) == 0
    events = json.loads(trace.read_text())["traceEvents"]
    ops = [
        o for o in read_mge(model.read_bytes()).walk() if o.name.startswith("mgb.") and "name" in o.attributes
    ]
    op_names = {o.attributes["name"].data for o in ops}  # type: ignore[attr-defined]
    named = [e["name"] for e in events if not e["name"].startswith("(")]
    assert set(named) <= op_names  # every kernel call but lowering's relayouts is a model operator
    heavy = [
        o.attributes["name"].data
        for o in ops
        if o.name in ("mgb.convolution", "mgb.conv_bias", "mgb.matrix_mul")
    ]  # type: ignore[attr-defined]
    assert len(heavy) == 21 and set(heavy) <= set(named)  # every convolution and the classifier is traced
    convs = [e for e in events if e["args"]["family"].startswith("conv2d")]
    assert len(convs) == 20 and all(not e["name"].startswith("(") for e in convs)
    assert {"fc.MatrixMul", "layer1.0.RELU[0]", "layer4.0.downsample.0.Convolution"} <= set(named)
    assert len(bars(read_png(png.read_bytes()))) == len(events)
    assert "layer4.1.RELU[1]" in capsys.readouterr().out


@needs_x86
def test_hostile_input_and_output_names_cannot_change_the_generated_c() -> None:
    from xdsl.dialects import func
    from xdsl.dialects.builtin import ArrayAttr, StringAttr

    from compiler.driver.compile import compile as compile_model

    module = read_mge(open(CONVNET, "rb").read())
    fn = next(op for op in module.ops if isinstance(op, func.FuncOp))
    evil_in, evil_out = 'da"ta", 0}}; int evil = 1; /* \\\n', "out??/\u00e9"
    fn.attributes["input_names"] = ArrayAttr([StringAttr(evil_in)])
    fn.attributes["output_names"] = ArrayAttr([StringAttr(evil_out)])
    compiled = compile_model(module, host_target(), progress=False)  # was a gcc syntax error
    x = np.load(data_path("convnet", "inputs.npz"))["data"]
    np.testing.assert_allclose(compiled(x)[0], compile_model(CONVNET, "ref")(x)[0], rtol=1e-4, atol=1e-5)
    source, _ = compiled.backend.emit(compiled.target, compiled.final_module())
    lines = source.splitlines()
    for table, name in (("xm_inputs_v0", evil_in), ("xm_outputs_v0", evil_out)):
        at = lines.index(f"static const xm_tensor_info {table}[] = {{")
        # one row, the name one literal whose escapes decode to exactly the name's bytes
        assert lines[at + 2 : at + 4] == ["  {0}", "};"]
        literal = lines[at + 1].removeprefix("  {").split(', "float32"')[0]
        assert literal[0] == literal[-1] == '"' and c_literal_bytes(literal[1:-1]) == name.encode()

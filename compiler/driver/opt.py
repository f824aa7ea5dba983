"""``xmge-opt``: the opt-like driver over xmge's dialects and passes (a subclass of xDSL's ``xDSLOptMain``).

    xmge-opt net.mlir -p mgb-canonicalize,mgb-dce          # run passes by name
    xmge-opt net.mge -p mgb-dce --print-weights             # a .mge input (backends.mge.reader)
    xmge-opt net.onnx -p canonicalize                       # an ONNX input (backends.onnx.reader)
    xmge-opt --list-passes                                  # every pass, its description and options
    xmge-opt net.mlir --load-plugin my_passes.py -p my-pass # an ad-hoc plugin (file or module)
    xmge-opt net.mge -p PIPELINE --verify-numerics [--input NAME=FILE.npy] [--dump-failing-ir DIR]
                                                            # which pass changed the numbers
    xmge-opt net.mge -p PIPELINE --graph out.svg            # the IR after the passes as a picture

Passes come from xDSL (``canonicalize``, ``cse``, ``dce``, ...), from xmge (``passes.registry``),
from installed packages (entry-point group ``xmge.passes``) and from ``--load-plugin``. Errors a user
can cause (unknown pass, malformed IR, a bad plugin) print one line, ``xmge-opt: error: ...``, and
exit with status 1.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.metadata
import os
import sys
from collections.abc import Sequence
from typing import IO

from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.arg_spec import parse_pipeline
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError
from xdsl.xdsl_opt_main import xDSLOptMain

from compiler.driver.numerics import add_verify_arguments, verify_for_cli
from dialects.errors import XmgeError
from dialects.kernel import Kernel
from dialects.layout import LayoutDialect
from dialects.tensor import Mgb
from dialects.weights import full_weights
from passes.registry import (
    BUILTIN_PASSES,
    ENTRY_POINT_GROUP,
    PassTable,
    PluginError,
    describe,
    describe_options,
    entry_point_passes,
    load_plugin,
)

DIALECT_ENTRY_POINT_GROUP = "xmge.dialects"


class OptError(XmgeError):
    """A usage error of ``xmge-opt``, reported as one line."""


class XmgeOptMain(xDSLOptMain):
    version_format = "xmge-opt (xdsl {xdsl_version})"

    def __init__(self, args: Sequence[str] | None = None) -> None:
        # Plugins must be loaded before xDSLOptMain registers passes and parses the pipeline,
        # so --load-plugin is read ahead of the full argument parser.
        pre = argparse.ArgumentParser(add_help=False)
        pre.add_argument("--load-plugin", action="append", default=[])
        known, _ = pre.parse_known_args(list(sys.argv[1:] if args is None else args))
        self.plugin_specs: list[str] = known.load_plugin
        self.pass_table = PassTable()
        super().__init__(description="xmge modular optimizer driver", args=args)

    # -- registration -------------------------------------------------------------------------
    def register_all_dialects(self) -> None:
        super().register_all_dialects()
        origins = dict.fromkeys(self.ctx.registered_dialect_names, "xDSL")
        self.ctx.register_dialect(Mgb.name, lambda: Mgb)
        origins[Mgb.name] = "xmge (dialects.tensor)"
        self.ctx.register_dialect(LayoutDialect.name, lambda: LayoutDialect)
        origins[LayoutDialect.name] = "xmge (dialects.layout)"
        # the kernel dialect too: a package's kernel.mlir reads back (and draws with --graph)
        self.ctx.register_dialect(Kernel.name, lambda: Kernel)
        origins[Kernel.name] = "xmge (dialects.kernel)"
        for ep in importlib.metadata.entry_points(group=DIALECT_ENTRY_POINT_GROUP):
            if ep.name in origins:
                raise PluginError(
                    f"plugin dialect {ep.name!r} from entry point '{ep.name} = {ep.value}' "
                    f"({DIALECT_ENTRY_POINT_GROUP}) clashes with the dialect {ep.name!r} "
                    f"from {origins[ep.name]}"
                )
            self.ctx.register_dialect(ep.name, ep.load)
            origins[ep.name] = f"entry point '{ep.name} = {ep.value}'"

    def register_all_passes(self) -> None:
        super().register_all_passes()  # xDSL's own passes (and xdsl.universe plugins)
        for name, factory in self.available_passes.items():
            self.pass_table.add(name, factory, "xDSL", builtin=True)
        for cls in BUILTIN_PASSES:
            self.pass_table.add_class(cls, builtin=True)
        entry_point_passes(self.pass_table, ENTRY_POINT_GROUP)
        for spec in self.plugin_specs:
            load_plugin(self.pass_table, spec)
        self.available_passes = dict(self.pass_table.factories)

    def register_all_frontends(self) -> None:
        super().register_all_frontends()
        self.available_frontends["mge"] = read_mge_frontend
        self.available_frontends["onnx"] = read_onnx_frontend

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        super().register_all_arguments(arg_parser)
        arg_parser.add_argument(
            "--load-plugin",
            action="append",
            default=[],
            metavar="FILE_OR_MODULE",
            help="import a Python file or module and register the ModulePass classes it defines",
        )
        arg_parser.add_argument(
            "--list-passes", action="store_true", help="list every pass with its description and options"
        )
        arg_parser.add_argument(
            "--list-kernels",
            action="store_true",
            help="list every kernel unit: backend, family, ISA, priority (higher is tried first), file, ops",
        )
        arg_parser.add_argument(
            "--graph",
            metavar="OUT.svg",
            help="also draw the IR after the passes as an operator graph (SVG): tensor ops, or kernel "
            "calls with the chosen kernel (fused epilogues in its name) and the model's operator name",
        )
        arg_parser.add_argument(
            "--print-weights",
            action="store_true",
            help="print #mgb.weight data in full instead of eliding it",
        )

        add_verify_arguments(arg_parser)
        # xmge's own passes and output targets first in --help; xDSL's long lists stay one flag away
        for action in arg_parser._actions:
            if "--passes" in action.option_strings:
                ours = [n for n in self.pass_table.factories if self.pass_table.origins[n] != "xDSL"]
                action.help = (
                    f"comma-separated pass pipeline, e.g. fold-batch-norm,fuse-conv-bias-nonlinearity. "
                    f"xmge passes: {', '.join(ours)}; xDSL's passes too (xmge-opt --list-passes)"
                )
            elif "--target" in action.option_strings:
                theirs = [t for t in self.available_targets if t not in (*XMGE_OUTPUT_TARGETS, "mlir")]
                action.help = (
                    "output: mlir (IR text, the default) or mge (a MegEngine .mge file, needs -o "
                    f"FILE); xDSL's targets too: {', '.join(theirs)}"
                )

    def setup_pipeline(self) -> None:
        try:
            names = [p.name for p in parse_pipeline(self.args.passes)]
        except ArgSpecParseError as exc:
            raise OptError(f"malformed pass pipeline {self.args.passes!r}: {_last_line(str(exc))}") from None
        for name in names:
            if name not in self.available_passes:
                close = difflib.get_close_matches(name, list(self.available_passes), n=3)
                hint = f"did you mean {', '.join(close)}? " if close else ""
                raise OptError(f"unknown pass {name!r}; {hint}run xmge-opt --list-passes to see them all")
        super().setup_pipeline()

    verify_log: IO[str] | None = None
    """Where --verify-numerics writes its stage table (standard error when None)."""

    def apply_passes(self, prog: ModuleOp) -> None:
        if self.args.verify_numerics:
            # the reference interpreter after every pass; the first pass that changes the numbers
            # raises NumericsMismatch (one line from main(), exit status 1)
            log = self.verify_log if self.verify_log is not None else sys.stderr
            verify_for_cli(prog, self.pipeline.passes, self.args, ctx=self.ctx, out=log)
        else:
            super().apply_passes(prog)
        if self.args.graph:
            from compiler.driver.pictures import graph_svg
            from compiler.serialization import atomic_write

            svg = graph_svg(prog)
            atomic_write(self.args.graph, lambda f: f.write(svg), "w")

    def register_all_targets(self) -> None:
        super().register_all_targets()
        # a placeholder entry so that -t mge is listed and accepted; run() writes the binary file
        self.available_targets["mge"] = _mge_target_entry

    # -- running ------------------------------------------------------------------------------
    def run(self) -> None:
        if self.args.list_passes:
            self.list_passes(sys.stdout)
            return
        if self.args.list_kernels:
            from backends.kernel_list import format_kernel_table, kernel_rows

            sys.stdout.write(format_kernel_table(kernel_rows()))
            return
        try:
            if self.args.target == "mge":
                self.run_to_mge()
                return
            with full_weights(self.args.print_weights):
                super().run()
        except UnicodeDecodeError as exc:
            raise OptError(
                f"{self.args.input_file or '<stdin>'}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at "
                f"offset {exc.start}); binary models are read by extension (.mge, .onnx) or -f mge/onnx"
            ) from None

    def run_to_mge(self) -> None:
        """``-t mge``: run the pipeline, then write the result as a ``.mge`` file (atomically)."""
        from backends.mge.writer import write_mge
        from compiler.serialization import atomic_write

        if not self.args.output_file:
            raise OptError("-t mge writes a binary .mge file: name it with -o FILE.mge")
        chunks, file_extension = self.prepare_input()
        if len(chunks) != 1:
            raise OptError("-t mge takes one module (no --split-input-file)")
        chunk, offset = chunks[0]
        try:
            module = self.parse_chunk(chunk, file_extension, offset)
        finally:
            chunk.close()
        if module is None:
            raise OptError(f"{self.args.input_file}: no module to write")
        self.apply_passes(module)
        data = write_mge(module)
        atomic_write(self.args.output_file, lambda f: f.write(data))

    def list_passes(self, out: IO[str]) -> None:
        """Every pass: ``name  description`` and its options, xmge's and plugins' first."""
        table = self.pass_table
        ours = [n for n in table.factories if table.origins[n] != "xDSL"]
        theirs = sorted(n for n in table.factories if table.origins[n] == "xDSL")
        for heading, names in (("xmge and plugin passes", ours), ("xDSL passes", theirs)):
            out.write(f"{heading}:\n")
            for name in names:
                cls: type[ModulePass] = table.factories[name]()
                origin = "" if name in table.builtin else f"  [{table.origins[name]}]"
                out.write(f"  {name:32} {describe(cls)}{origin}\n")
                for option in describe_options(cls):
                    out.write(f"  {'':32}   {option}\n")


def read_mge_frontend(stream: IO[bytes]) -> ModuleOp:
    """The ``.mge`` frontend: ``backends.mge.reader.read_mge(data: bytes) -> ModuleOp``, imported lazily."""
    try:
        from backends.mge.reader import read_mge
    except ImportError as exc:
        raise OptError(
            f"cannot read .mge files: the MegEngine reader (backends.mge.reader) is unavailable: {exc}"
        ) from None
    return read_mge(stream.read())


def read_onnx_frontend(stream: IO[bytes]) -> ModuleOp:
    """The ``.onnx`` frontend: ``backends.onnx.reader.read_onnx(data: bytes) -> ModuleOp``, imported
    lazily (it needs the optional ``onnx`` package)."""
    from backends.onnx.reader import read_onnx

    return read_onnx(stream.read())


XMGE_OUTPUT_TARGETS = ("mge",)


def _mge_target_entry(prog: ModuleOp, output: IO[str]) -> None:
    raise OptError("-t mge is written by XmgeOptMain.run_to_mge, not through a text stream")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else text


def _one_line(exc: BaseException) -> str:
    """A one-line description of a user-facing error."""
    if isinstance(exc, ParseError):
        return f"{exc.span.get_location()}: {exc.msg}"
    text = str(exc).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    if isinstance(exc, DiagnosticException) and lines:
        return lines[0].strip()
    return " ".join(line.strip() for line in lines) or type(exc).__name__


USER_ERRORS = (OptError, PluginError, ParseError, DiagnosticException, ArgSpecParseError, OSError, ValueError)


def exit_quietly_on_broken_pipe() -> None:
    """The reader of our output went away (``xmge-opt ... | head``): no traceback, no message.
    Python's documented recipe: point stdout at /dev/null so the final flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(1)


def main(argv: Sequence[str] | None = None) -> None:
    try:
        XmgeOptMain(args=argv).run()
    except BrokenPipeError:
        exit_quietly_on_broken_pipe()
    except USER_ERRORS as exc:
        if os.environ.get("XMGE_TRACEBACK"):
            raise
        print(f"xmge-opt: error: {_one_line(exc)}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()

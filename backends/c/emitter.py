"""C code generation from the kernel dialect: one emitter, thin per-target subclasses (tinygrad's
``cstyle`` renderer shape).

:class:`CEmitter` renders a planned ``kernel`` module into ``model.c``: every ``kernel.def`` once (from
its template), then a ``xm_model_run_impl_v<i>`` per variant calling them on arena / weights / input /
output pointers (and the call's context, for kernels that can fail), plus the variant table (shapes,
arena and weights sizes) that the runtime reads. Every exported symbol carries the model's prefix
(``XM_PREFIX``, ``backends/c/runtime/xm_runtime.h``). What differs between
targets is a handful of class-level knobs (vector width and intrinsic spellings, compiler flags): each
emitter is a view of one :mod:`backends.c.isa_facts` record (:class:`X86Avx2Emitter`,
:class:`X86Avx512Emitter`, the ARM emitters, the x86 extension levels).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, StringAttr, TensorType
from xdsl.ir import SSAValue

from backends.c.isa_facts import AVX2, AVX512, GENERIC, KNOBS, IsaFacts
from backends.c.kernels import KERNELS
from backends.c.symbols import DEFAULT_PREFIX, c_string, check_prefix
from backends.c.templates import Template
from dialects import kernel as K
from dialects.dtypes import dtype_name
from dialects.errors import XmgeError


class EmitError(XmgeError, ValueError):
    pass


class CEmitter:
    """Portable C (``generic`` templates only): the base every C target refines."""

    # the ISA's knobs (vector type, intrinsic spellings, GEMM register blocking, cflags): a view of
    # one isa_facts record, which a subclass names as ``facts``
    facts: ClassVar[IsaFacts] = GENERIC
    name: ClassVar[str]
    vec: ClassVar[int]
    vtype: ClassVar[str]
    header: ClassVar[str]
    load: ClassVar[str]
    loadu: ClassVar[str]
    store: ClassVar[str]
    storeu: ClassVar[str]
    set1: ClassVar[str]
    zero: ClassVar[str]
    fma: ClassVar[str]
    mask_type: ClassVar[str]
    mask_make: ClassVar[str]
    maskload: ClassVar[str]
    maskstore: ClassVar[str]
    cflags: ClassVar[tuple[str, ...]]
    gemm_mr: ClassVar[int]
    gemm_nr: ClassVar[int]
    gemm_kc: ClassVar[int]

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "facts" in cls.__dict__:
            _view(cls)

    def __init__(self, profile: bool = False) -> None:
        # profile: time every call into xm_profile_ms[] (read with xm_profile(), with each call's
        # kernel symbol and the model's operator name); for per-layer and per-kernel reports
        self.profile = profile

    def template(self, d: K.KernelDefOp) -> Template:
        t = KERNELS.unit(d.family.data, d.isa.data)
        if not isinstance(t, Template):
            raise EmitError(f"no C template for kernel family {d.family.data!r} on ISA {d.isa.data!r}")
        return t

    # -- the model translation unit -----------------------------------------------------------
    def emit(
        self,
        modules: ModuleOp | Sequence[ModuleOp],
        *,
        prefix: str = DEFAULT_PREFIX,
        weights_offsets: Sequence[int] | None = None,
    ) -> str:
        """``model.c`` of one planned module, or of several variants of one model (one per input
        shape) in one library: every kernel once, a run function per variant, the variant table
        ``xm_desc`` the runtime reads, and ``XM_PREFIX`` (``prefix``) naming every exported symbol.
        ``weights_offsets``: where each variant's weights start in the blob handed to ``create``
        (64-byte multiples; variants with equal weights may share one); default one after another."""
        variants = [modules] if isinstance(modules, ModuleOp) else list(modules)
        if not variants:
            raise EmitError("no module to emit")
        check_prefix(prefix)
        if self.profile and len(variants) != 1:
            raise EmitError("profiling builds take one module, not several variants")
        fns, plans = [], []
        for module in variants:
            found = [op for op in module.ops if isinstance(op, func.FuncOp)]
            if len(found) != 1:
                raise EmitError(f"expected one function to emit, found {len(found)}")
            plan = K.plan_of(found[0])
            if plan is None:
                raise EmitError("the module has no memory plan: run kernel-plan-memory first")
            fns.append(found[0])
            plans.append(plan)
        sizes = [p.weights.data for p in plans]
        offsets = list(weights_offsets) if weights_offsets is not None else _packed(sizes)
        if len(offsets) != len(variants) or any(o < 0 or o % 64 for o in offsets):
            raise EmitError(f"weights offsets {offsets} must be one 64-byte multiple per variant")
        total = max((o + n for o, n in zip(offsets, sizes, strict=True)), default=0)
        out = [
            "/* generated by xmge: do not edit */",
            "#ifndef XM_PREFIX",
            f"#define XM_PREFIX {prefix}",
            "#endif",
            *(["#define _POSIX_C_SOURCE 199309L", "#define XM_PROFILE_CLOCK 1"] if self.profile else []),
            '#include "xm_kernels.h"',
            self.header,
            "",
        ]
        supports: list[str] = []
        kernels: dict[str, str] = {}
        for module, fn in zip(variants, fns, strict=True):
            defs = K.defs_of(module)
            for sym in self._used(fn):
                t = self.template(defs[sym])
                s = t.support(self)
                if s and s not in supports:
                    supports.append(s)
                text = t.render(self, sym, defs[sym].param_values())
                if kernels.setdefault(sym, text) != text:
                    raise EmitError(f"variants define kernel {sym} differently")
        out.extend(supports)
        out.extend(kernels.values())
        for i, (module, fn) in enumerate(zip(variants, fns, strict=True)):
            out.append(self._run_function(fn, K.defs_of(module), f"xm_model_run_impl_v{i}"))
        out.append(self._metadata(fns, plans, offsets, total))
        return "\n".join(out) + "\n"

    @staticmethod
    def _used(fn: func.FuncOp) -> list[str]:
        used: list[str] = []
        for op in fn.body.block.ops:
            if isinstance(op, K.CallOp):
                sym = op.callee.string_value()
                if sym not in used:
                    used.append(sym)
        return used

    def _pointer(self, fn: func.FuncOp, v: SSAValue, roots: dict[SSAValue, SSAValue]) -> str:
        base = roots[v]
        if base in fn.body.block.args:
            return f"((float*)in[{fn.body.block.args.index(base)}])"  # type: ignore[arg-type]
        op = base.owner
        place = K.places_of(op)[list(op.results).index(base)]  # type: ignore[union-attr]
        if place is None:
            raise EmitError(f"{op.name} has no planned place")  # type: ignore[union-attr]
        if place.where == K.Space.ARENA:
            return f"((float*)(arena + {place.at}))"
        if place.where == K.Space.WEIGHTS:
            return f"((float*)(weights + {place.at}))"
        if place.where == K.Space.OUTPUT:
            return f"((float*)out[{place.at}])"
        return f"((float*)in[{place.at}])"

    def _run_function(self, fn: func.FuncOp, defs: dict[str, K.KernelDefOp], name: str) -> str:
        plan = K.plan_of(fn)
        assert plan is not None
        ws_at = plan.arena.data - plan.workspace.data
        roots: dict[SSAValue, SSAValue] = {a: a for a in fn.body.block.args}
        body: list[str] = []
        names: list[str] = []
        layers: list[str] = []  # the model's operator name of each call, for per-layer profiles
        for op in fn.body.block.ops:
            if isinstance(op, K.ViewOp):
                roots[op.output] = roots[op.src]
                continue
            for r in op.results:
                roots[r] = r
            if isinstance(op, K.CallOp):
                sym = op.callee.string_value()
                args = [self._pointer(fn, v, roots) for v in (*op.args, *op.outputs)]
                args += [f"arena + {ws_at}", "nt"]
                if getattr(self.template(defs[sym]), "fails", False):
                    args.append("ctx")
                call = f"{sym}({', '.join(args)});"
                if self.profile:
                    i = len(body)
                    call = (
                        f"{{ const double t0 = xm_now_ms(); {call} xm_profile_ms[{i}] += xm_now_ms() - t0; }}"
                    )
                    names.append(sym)
                    layers.append(op.layer_name() or f"({defs[sym].family.data})")
                body.append("  " + call)
        prof = ""
        if self.profile:
            # timing accumulates process-wide: profiling builds are for one caller at a time
            quoted = ", ".join(f'"{n}"' for n in names)
            layer_names = ", ".join(c_string(n) for n in layers)
            prof = (
                f"static double xm_profile_ms[{max(1, len(names))}];\n"
                f"static const char* xm_profile_names[] = {{{quoted}}};\n"
                f"static const char* xm_profile_layers[] = {{{layer_names}}};\n"
                f"int XM_SYM(profile)(const char*** names, const char*** layers, double** ms);\n"
                f"int XM_SYM(profile)(const char*** names, const char*** layers, double** ms) {{\n"
                f"  *names = xm_profile_names; *layers = xm_profile_layers; *ms = xm_profile_ms;\n"
                f"  return {len(names)};\n}}\n"
            )
        return prof + (
            f"static void {name}(void* const* in, void* const* out, unsigned char* arena,\n"
            "                       const unsigned char* weights, int nt, xm_ctx* ctx) {\n"
            "  (void)in; (void)out; (void)arena; (void)weights; (void)nt; (void)ctx;\n"
            + "\n".join(body)
            + "\n}\n"
        )

    def _metadata(
        self, fns: Sequence[func.FuncOp], plans: Sequence[K.PlanAttr], offsets: Sequence[int], total: int
    ) -> str:
        def names(fn: func.FuncOp, key: str, n: int, prefix: str) -> list[str]:
            a = fn.attributes.get(key)
            got = [x.data for x in a.data if isinstance(x, StringAttr)] if isinstance(a, ArrayAttr) else []
            return got if len(got) == n else [f"{prefix}{i}" for i in range(n)]

        def table(name: str, types: list, labels: list[str]) -> list[str]:
            lines = []
            for i, t in enumerate(types):
                assert isinstance(t, TensorType)
                shape = list(t.get_shape())
                if len(shape) > 8:
                    raise EmitError(f"{labels[i]} has {len(shape)} dimensions: the runtime takes up to 8")
                dims = ", ".join(map(str, shape + [0] * (8 - len(shape))))
                # a name comes from the model file: escaped, it cannot end the literal
                lines.append(
                    f'  {{{c_string(labels[i])}, "{dtype_name(t.element_type)}", {len(shape)}, {{{dims}}}, '
                    f"{K.nbytes(t)}}},"
                )
            return [f"static const xm_tensor_info {name}[] = {{", *lines, "  {0}", "};"]

        lines: list[str] = []
        rows: list[str] = []
        for i, (fn, plan, at) in enumerate(zip(fns, plans, offsets, strict=True)):
            ins = list(fn.function_type.inputs.data)
            outs = list(fn.function_type.outputs.data)
            lines += table(f"xm_inputs_v{i}", ins, names(fn, "input_names", len(ins), "input"))
            lines += table(f"xm_outputs_v{i}", outs, names(fn, "output_names", len(outs), "output"))
            rows.append(
                f'  {{"v{i}", {len(ins)}, {len(outs)}, xm_inputs_v{i}, xm_outputs_v{i}, {plan.arena.data}UL, '
                f"{at}UL, {plan.weights.data}UL, {plan.threads.data}, xm_model_run_impl_v{i}}},"
            )
        lines += [
            f"static const xm_variant xm_variants[{len(rows)}] = {{",
            *rows,
            "};",
            f"const xm_model_desc xm_desc = {{{len(rows)}, xm_variants, {total}UL}};",
        ]
        return "\n".join(lines)


def _packed(sizes: Sequence[int]) -> list[int]:
    """Offsets of blobs of ``sizes`` laid one after another, each at a 64-byte multiple."""
    out, at = [], 0
    for n in sizes:
        out.append(at)
        at += (n + 63) // 64 * 64
    return out


def _view(cls: type[CEmitter]) -> None:
    """Set ``cls``'s knobs from its ``facts`` record."""
    for knob in KNOBS:
        setattr(cls, knob, getattr(cls.facts, knob))


_view(CEmitter)


class X86Avx2Emitter(CEmitter):
    facts = AVX2


class X86Avx512Emitter(X86Avx2Emitter):
    facts = AVX512

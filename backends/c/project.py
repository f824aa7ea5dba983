"""The build files of a saved package: a Makefile, a CMakeLists.txt and a README.md that rebuild its
library and runner from the saved sources, on the device (AArch64) or any x86-64 machine with the
target's CPU features. One template serves every architecture; only the words about the machine
differ."""

from __future__ import annotations

from collections.abc import Sequence

MAKEFILE = """# Build the xmge model {name} ({target}) from its sources: `make` (cross: make CC={cross_cc})
CC ?= cc
CFLAGS ?= {cflags}
LDLIBS = -lm

all: {library} runner

{library}: {lib_sources} {headers}
\t$(CC) $(CFLAGS) -shared {lib_sources} -o $@ $(LDLIBS)

runner: {lib_sources} runner.c {headers}
\t$(CC) $(CFLAGS) {lib_sources} runner.c -o $@ $(LDLIBS)

run: runner
\t./runner weights.bin -t 1 -n 20

clean:
\trm -f {library} runner

.PHONY: all run clean
"""

CMAKELISTS = """cmake_minimum_required(VERSION 3.10)
project({name} C)
set(CMAKE_C_STANDARD 11)
find_package(OpenMP)
find_package(Threads REQUIRED)
set(XM_FLAGS {cflags_cmake})
add_library({name} SHARED {lib_sources})
add_executable(runner {lib_sources} runner.c)
foreach(t {name} runner)
  target_compile_options(${{t}} PRIVATE ${{XM_FLAGS}})
  target_link_libraries(${{t}} PRIVATE m Threads::Threads)
  if(OpenMP_C_FOUND)
    target_link_libraries(${{t}} PRIVATE OpenMP::OpenMP_C)
  endif()
endforeach()
"""

README = """# xmge model `{name}` for {target}

This folder is an xmge package: `model.json` describes it (inputs and outputs with their dtypes and the
shapes of every variant, the target and the CPU features it needs, the sha256 of every file, the
format and xmge versions).

Load it back in Python without compiling anything (the hashes and the CPU are checked first):

    import compiler as xm
    model = xm.load_compiled("{directory}")
    y = model(x)

or from the shell: `xmge run {directory} -i NAME=x.npy`, `xmge bench {directory}`.

Build it again from the sources on {machine} with one command:

    make

(or `cmake -B build && cmake --build build`). Then run it:

    ./runner weights.bin -t THREADS -n ITERS [-i input0.bin ...] [-o output0.bin ...]

Inputs and outputs are raw little-endian tensors in the order and shapes of model.json. In your own
program, link {library} (`-l{name}`) and call `{name}_api()` (`XM_DECLARE_API({name})`), or `dlopen` it and
take the descriptor with `xm_api_from_handle(handle, "{name}")`: the generic C API of xm_api.h; from C++,
the `Network` of xmge.hpp.
{prebuilt}"""

PREBUILT = """
`prebuilt/` holds the same library and a statically linked runner cross-built on the host
(`qemu-aarch64 -cpu max prebuilt/runner weights.bin` runs it there under emulation).
"""


def machine_words(arch: str, target: str) -> str:
    """Which machine builds and runs the package, in words for its README."""
    if arch == "arm":
        extras = "".join(
            word
            for flag, word in (("dot", " with the dot product"), ("fp16", " with FP16 arithmetic"))
            if flag in target
        )
        return f"the device (AArch64, ARMv8.2-A{extras})"
    return f"an x86-64 machine whose CPU has the features model.json lists (target {target})"


def project_files(
    target: str,
    cflags: Sequence[str],
    *,
    arch: str,
    name: str = "xmge_model",
    library: str = "libxmge_model.so",
    lib_sources: Sequence[str] = ("model.c", "xm_runtime.c", "xm_parallel.c"),
    headers: Sequence[str] = ("xm_runtime.h", "xm_kernels.h"),
    directory: str = "path/to/this/folder",
) -> dict[str, str]:
    """Makefile, CMakeLists.txt and README.md building ``library`` and ``runner`` from the saved
    sources with ``cflags`` (``-fPIC`` always; CMake takes OpenMP from ``find_package``)."""
    device_flags = [f for f in cflags if f != "-fPIC"] + ["-fPIC"]
    sources = " ".join(lib_sources)
    return {
        "Makefile": MAKEFILE.format(
            name=name,
            target=target,
            cross_cc="aarch64-linux-gnu-gcc" if arch == "arm" else "gcc",
            cflags=" ".join(device_flags),
            library=library,
            lib_sources=sources,
            headers=" ".join(headers),
        ),
        "CMakeLists.txt": CMAKELISTS.format(
            name=name,
            lib_sources=sources,
            cflags_cmake=" ".join(f for f in device_flags if f not in ("-fopenmp", "-pthread")),
        ),
        "README.md": README.format(
            name=name,
            target=target,
            directory=directory,
            machine=machine_words(arch, target),
            library=library,
            prebuilt=PREBUILT if arch == "arm" else "",
        ),
    }


__all__ = ["project_files"]

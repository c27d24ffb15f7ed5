"""The C side of an exported folder: the bundle as a C array, the runtime's sources, and the builds
(Makefile, CMakeLists.txt) that make them one static library, libpoet.a.

The runtime is what firmware/core holds at export time, less the serial protocol server (the exported
library has no host to talk to): found on disk, so a source added to the core is exported without a
change here. kernels/reference/ is the specification, not compiled; the few of its files an optimised
kernel #includes come along as headers.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from poet.device.firmware import FIRMWARE_DIR

CORE = FIRMWARE_DIR / "core"
LEFT_OUT = {"protocol.c", "protocol.h"}  # the serial protocol server: only the protocol image runs it
SUBDIRS = ("ops", "kernels")  # each folder's own files; kernels/reference/ is left out (the specification)
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
CFLAGS = "-std=c99 -O2 -Wall -Wextra -Werror"
RUNTIME = Path("runtime")  # the runtime's folder in an export: runtime/core/...
BYTES_PER_LINE = 16


def runtime_files(core: Path = CORE) -> tuple[list[Path], list[Path]]:
    """(compiled, all): the runtime's C sources to compile, and every file to copy (those, the headers,
    and the files they #include, followed from one another), each relative to core's parent (core/...)."""
    chosen = [p for p in sorted(core.iterdir()) if p.suffix in (".c", ".h") and p.name not in LEFT_OUT]
    for sub in SUBDIRS:
        chosen += [p for p in sorted((core / sub).iterdir()) if p.suffix in (".c", ".h")]
    compiled = [p for p in chosen if p.suffix == ".c"]
    found: dict[Path, None] = dict.fromkeys(chosen)
    todo = list(chosen)
    while todo:  # an #include of a file left out (a reference kernel) brings it along, uncompiled
        src = todo.pop()
        for name in _INCLUDE.findall(src.read_text(errors="replace")):
            dep = (src.parent / name).resolve()
            if dep.is_file() and dep.is_relative_to(core.resolve()) and dep not in found and \
                    dep.name not in LEFT_OUT:
                found[dep] = None
                todo.append(dep)
    base = core.resolve().parent
    return ([p.resolve().relative_to(base) for p in compiled],
            sorted(p.resolve().relative_to(base) for p in found))


def copy_runtime(out: Path, core: Path = CORE) -> list[Path]:
    """Copy the runtime into out/runtime/core/...; returns the sources to compile, relative to out."""
    compiled, every = runtime_files(core)
    base = core.resolve().parent
    for rel in every:
        (out / RUNTIME / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(base / rel, out / RUNTIME / rel)
    return [RUNTIME / c for c in compiled]


def bundle_c(data: bytes) -> str:
    """bundle.c: the bundle's bytes, 8-aligned (the runtime reads its sections in place as words) by a
    union with a uint64_t member: portable C99, no compiler attributes. bundle.h names the bytes
    poet_bundle, an array."""
    lines = ["    " + ", ".join(f"0x{b:02x}" for b in data[at:at + BYTES_PER_LINE]) + ","
             for at in range(0, len(data), BYTES_PER_LINE)]
    return ("/* Written by `poet export`: the device bundle (docs/spec.md section 7). Do not edit. */\n"
            '#include "bundle.h"\n\n'
            "const poet_bundle_t poet_bundle_data = {{\n" + "\n".join(lines) + "\n}};\n\n"
            "const uint32_t poet_bundle_bytes = POET_BUNDLE_BYTES;\n")


def bundle_h(pool_bytes: int, bundle_bytes: int) -> str:
    return ("/* Written by `poet export`: the device bundle (docs/spec.md section 7). Do not edit. */\n"
            "#ifndef POET_BUNDLE_H\n#define POET_BUNDLE_H\n\n#include <stdint.h>\n\n"
            '#ifdef __cplusplus\nextern "C" {\n#endif\n\n'
            "/* The RAM pool poet_init needs for this bundle; give it 8-aligned, e.g.\n"
            " *     static uint64_t pool[(POET_BUNDLE_POOL_BYTES + 7u) / 8u]; */\n"
            f"#define POET_BUNDLE_POOL_BYTES {pool_bytes}u\n"
            f"#define POET_BUNDLE_BYTES {bundle_bytes}u\n\n"
            "/* The bundle's bytes, read in place (they stay in flash). The union aligns them to 8, as\n"
            " * poet_init requires, in plain C99; poet_bundle is the const uint8_t array to pass it. */\n"
            "typedef union {\n"
            "    uint8_t bytes[POET_BUNDLE_BYTES];\n"
            "    uint64_t align[(POET_BUNDLE_BYTES + 7u) / 8u];\n"
            "} poet_bundle_t;\n"
            "extern const poet_bundle_t poet_bundle_data;\n"
            "#define poet_bundle (poet_bundle_data.bytes)\n"
            "extern const uint32_t poet_bundle_bytes;\n\n"
            "#ifdef __cplusplus\n}\n#endif\n\n#endif\n")


def makefile(sources: list[Path]) -> str:
    srcs = " \\\n       ".join(str(s) for s in [*sources, Path("bundle.c")])
    return (
        "# Written by `poet export`: libpoet.a, the runtime and the bundle. Cross-compile with e.g.\n"
        "#   make CC=arm-none-eabi-gcc CFLAGS='-std=c99 -O2 -Wall -Wextra -Werror -mcpu=cortex-m4 -mthumb "
        "-mfloat-abi=hard -mfpu=fpv4-sp-d16'\n"
        "# The application links libpoet.a (and -lm) and implements core/port.h's functions the runtime calls.\n"
        "CC ?= cc\nAR ?= ar\n"
        f"CFLAGS ?= {CFLAGS}\n"
        "CPPFLAGS += -I. -Iruntime/core\n\n"
        f"SRCS := {srcs}\n"
        "OBJS := $(SRCS:%.c=build/%.o)\n\n"
        ".PHONY: all clean\n\nall: libpoet.a\n\n"
        "libpoet.a: $(OBJS)\n\trm -f $@\n\t$(AR) rcs $@ $(OBJS)\n\n"
        "build/%.o: %.c\n\t@mkdir -p $(dir $@)\n\t$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<\n\n"
        "clean:\n\trm -rf build libpoet.a\n")


def cmakelists(sources: list[Path]) -> str:
    srcs = "\n".join(f"    {s}" for s in [*sources, Path("bundle.c")])
    return (
        "# Written by `poet export`: the `poet` static library, the runtime and the bundle.\n"
        "# add_subdirectory() this folder and link `poet`; the application implements core/port.h.\n"
        "cmake_minimum_required(VERSION 3.13)\n"
        "project(poet C)\n\n"
        "add_library(poet STATIC\n" + srcs + "\n)\n"
        "set_target_properties(poet PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)\n"
        "target_include_directories(poet PUBLIC ${CMAKE_CURRENT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/runtime/core)\n"
        "if(CMAKE_C_COMPILER_ID MATCHES \"GNU|Clang\")\n"
        "  target_compile_options(poet PRIVATE -Wall -Wextra -Werror)\n"
        "endif()\n"
        "find_library(POET_LIBM m)\n"
        "if(POET_LIBM)\n  target_link_libraries(poet PUBLIC ${POET_LIBM})\nendif()\n")

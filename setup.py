"""Builds kvprobe's C engine (src/, include/) into the Python package as one shared library,
loaded with ctypes (python/kvprobe). Needs a C compiler and the engine's build dependencies
(Debian: sh tools/setup.sh). The version is the engine's (include/kvprobe/kvprobe.h)."""
import glob
import os
import re

from setuptools import Extension, setup

ROOT = os.path.dirname(os.path.abspath(__file__))


def version():
    text = open(os.path.join(ROOT, "include", "kvprobe", "kvprobe.h"), encoding="utf-8").read()
    return re.search(r'#define KVPROBE_VERSION "([^"]+)"', text).group(1)


# Every library layer, as the Makefile's LIB_SRC: all of src/ but the CLI (a layer added later
# cannot be missed, which left kvp_policy_name undefined once).
sources = sorted(f for f in glob.glob("src/*/*.c") if not f.startswith("src/cli/")) + ["python/kvprobe/_shim.c"]
native = Extension(
    "kvprobe._native",
    sources=sources,
    include_dirs=["include"],
    libraries=["pcre2-8", "utf8proc", "cjson", "z", "crypto", "m", "pthread"],
    # the engine's own flags (Makefile): exact dequantization needs no implicit FMA contraction
    extra_compile_args=["-std=c11", "-D_GNU_SOURCE", "-O3", os.environ.get("KVPROBE_ARCH", "-march=native"),
                        "-ffp-contract=off", "-Wno-unused-parameter"],
)
setup(version=version(), ext_modules=[native])

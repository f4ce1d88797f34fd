"""The compiled bitstream reader, ltowrap._bitcode, and the backend clang's fork server,
ltowrap._forkserver: optional, so that an install without a working C compiler still succeeds,
runs the Python reader (formats/bitcode.py) and starts each backend clang anew.

Python's configured compiler (usually gcc) is used when it is there; when it is not, the
clang that every ltowrap user has builds it instead."""

import shutil

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

CLANGS = ("clang", *(f"clang-{v}" for v in range(30, 12, -1)))


class BuildExt(build_ext):
    def build_extensions(self) -> None:
        compiler = getattr(self.compiler, "compiler_so", None)
        if compiler and not shutil.which(compiler[0]):
            clang = next((c for c in CLANGS if shutil.which(c)), None)
            if clang is not None:
                for name in ("compiler", "compiler_so", "linker_so"):
                    command = getattr(self.compiler, name, None)
                    if command:
                        self.compiler.set_executable(name, [clang, *command[1:]])
        super().build_extensions()


# ltowrap._forkserver is not a Python extension but a library preloaded into the backend clang
# (jobs/forkserver.py); built the same way, it is optional the same way.
setup(ext_modules=[Extension("ltowrap._bitcode", ["ltowrap/_bitcode.c"], optional=True,
                             extra_compile_args=["-std=c11", "-O2"]),
                   Extension("ltowrap._forkserver", ["ltowrap/_forkserver.c"], optional=True,
                             extra_compile_args=["-std=c11", "-O2"], libraries=["dl"])],
      cmdclass={"build_ext": BuildExt})

"""The compiled bitstream reader, ltowrap._bitcode: optional, so that an install without a
working C compiler still succeeds and runs the Python reader (formats/bitcode.py)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("ltowrap._bitcode", ["ltowrap/_bitcode.c"], optional=True,
                             extra_compile_args=["-std=c11", "-O2"])])

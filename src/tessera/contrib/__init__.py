"""Targets that plug real libraries into tessera through target hooks.

Each module registers its target kind and alias when imported; `import
tessera` imports them all, so the aliases work out of the box:

    target="blas"          host C + OpenBLAS (contrib/blas.py)
    target="onnxruntime"   host C + onnxruntime for operators tessera lacks (contrib/onnxruntime.py)
"""

from . import blas, onnxruntime  # noqa: F401  (registration)

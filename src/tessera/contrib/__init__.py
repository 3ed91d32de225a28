"""Targets that plug real libraries into tessera through target hooks.

Importing a module registers its target kind and alias:

    import tessera.contrib.blas          # target="blas": host C + OpenBLAS
    import tessera.contrib.onnxruntime   # target="onnxruntime": host C + onnxruntime fallback
"""

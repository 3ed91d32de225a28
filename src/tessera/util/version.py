"""The package version, in a module of its own so that any layer can read it.

`tessera/__init__.py` sits above every package; a backend reading the
version from there would import the whole top level.
"""

__version__ = "0.1.0"

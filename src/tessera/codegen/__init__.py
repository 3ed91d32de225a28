"""Code generators: TIR to C. Importing the package registers the `c` target kind."""

from . import c_target  # noqa: F401  (registers the `c` kind)

"""The int8 activation bound of a quantised model (re-exported: it lives in `tessera.backend.int8_bound`,
where `tessera compile --memory-report` can use it)."""

from ..backend.int8_bound import INT8_DTYPES, int8_activation_bound, layer_int8_bytes

__all__ = ["INT8_DTYPES", "int8_activation_bound", "layer_int8_bytes"]

"""Runtime: loading compiled modules and executing them."""

from .export import load_module
from .graph_executor import GraphModule

__all__ = ["GraphModule", "load_module"]

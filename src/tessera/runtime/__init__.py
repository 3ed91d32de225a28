"""Runtime: loading compiled modules and executing them.

Nothing here imports the compiler at load or run time: `load_module` and
`GraphModule` work in a process that never builds a model.
"""

from .graph_executor import GraphModule
from .graph_library import GraphExecutorLibrary
from .load import load_module

__all__ = ["GraphExecutorLibrary", "GraphModule", "load_module"]

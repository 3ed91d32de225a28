"""Graph passes and the pass infrastructure."""

from .dead_code import DeadCodeElimination
from .fold_constant import FoldConstant
from .fuse_ops import FuseOps
from .infer_type import InferType
from .pass_infra import (
    FunctionPass, Pass, PassContext, PassInstrument, PassTiming, PassTimingInstrument, PrintIRInstrument, Sequential,
)
from .ir_dump import IRDumpInstrument
from .recognise_activations import RecogniseActivations
from .simplify_inference import DenseToMatmul, SimplifyInference

__all__ = [
    "DeadCodeElimination", "DenseToMatmul", "FoldConstant", "FunctionPass", "FuseOps", "IRDumpInstrument",
    "InferType", "Pass", "PassContext", "PassInstrument", "PassTiming", "PassTimingInstrument", "PrintIRInstrument",
    "RecogniseActivations", "Sequential", "SimplifyInference",
]

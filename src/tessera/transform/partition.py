"""The partition pipeline for one accelerator, as `tessera.build` runs it.

    MergeComposite(kind's pattern table) -> AnnotateTarget([target])
        -> MergeCompilerRegions -> PartitionGraph

`build()` calls this for each accelerator of a composite target, in order:
what the first accelerator takes, later ones never see.
"""

from __future__ import annotations

from ..relay.module import IRModule
from ..target.target import Target
from .annotate_target import AnnotateTarget
from .compiler_regions import MergeCompilerRegions, PartitionGraph
from .merge_composite import MergeComposite
from .pass_infra import Pass, PassContext, Sequential


def partition_pipeline(target: Target, prefix: str = "tsgen_", host: Target | None = None) -> Sequential:
    """The passes that partition for `target`, as one Sequential named partition_for_<kind>. `host`, the
    composite's host, lets pattern entries leave a match to the host's own faster kernels."""
    passes: list[Pass] = []
    if target.kind.pattern_table:
        passes.append(MergeComposite(target.kind.pattern_table, host))
    passes += [AnnotateTarget([target]), MergeCompilerRegions(),
               PartitionGraph({target.kind.name: target}, prefix)]
    return Sequential(passes, name=f"partition_for_{target.kind.name}")


def partition_for(mod: IRModule, target: Target, ctx: PassContext | None = None,
                  prefix: str = "tsgen_", host: Target | None = None) -> IRModule:
    return partition_pipeline(target, prefix, host)(mod, ctx or PassContext.current())

"""The `c` target kind, registered next to its code generator.

C source compiled by gcc: the host CPU, or a Cortex-M core with
`-mcpu=cortex-m*`. Its toolchain and attribute checks live with the target
layer (`tessera.target.builtin`); its default code generator is
`build_c_module`, which is why the kind is registered here and the target
layer never imports the code generators.
"""

from __future__ import annotations

from ..target.builtin import c_toolchain, validate_c
from ..target.kind import OptionType, TargetKind
from .c_host import build_c_module

C_KIND = (
    TargetKind.register("c", device="cpu", doc="C source compiled by gcc: the host CPU or a Cortex-M core")
    .add_attr_option("mcpu", OptionType.STR, doc="CPU to compile for, e.g. cortex-m7 (default: the host)")
    .add_attr_option("march", OptionType.STR, doc="gcc -march for host builds (default native)")
    .add_attr_option("mattr", OptionType.STR_LIST, default=(), doc="extra -m features, e.g. avx2,fma")
    .add_attr_option("mfloat-abi", OptionType.STR, choices=("soft", "softfp", "hard"),
                     doc="Arm float ABI (default: hard when the core has an FPU)")
    .add_attr_option("mfpu", OptionType.STR, doc="Arm FPU (default: the core's)")
    .add_attr_option("cc", OptionType.STR, doc="C compiler executable to use instead of the default")
    .add_attr_option("accelerators", OptionType.TARGET_LIST, doc="accelerator targets, partitioned in order")
    .add_attr_option("memory", OptionType.STR,
                     doc="memory this core works in, for named pieces (default: shared system memory); "
                         "tensors moving between pieces with different memories are copied")
    .set_default_keys("cpu")
    .set_validate(validate_c)
    .set_toolchain(c_toolchain)
    .set_codegen(build_c_module)
)

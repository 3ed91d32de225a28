"""Neural-network operators (convolution, pooling, matmul, normalisation).

Importing the package registers every operator module below.
"""

from . import (  # noqa: F401  (registration)
    conv, conv_blocked, conv_planes_gemm, conv_prepacked, conv_transpose, matmul, matmul_prepacked, norm, pool, softmax,
)

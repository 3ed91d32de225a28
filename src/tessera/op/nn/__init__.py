"""Neural-network operators (convolution, pooling, matmul, normalisation).

Importing the package registers every operator module below.
"""

from . import conv, conv_blocked, conv_prepacked, conv_transpose, matmul, matmul_prepacked, norm, pool, softmax  # noqa: F401  (registration)

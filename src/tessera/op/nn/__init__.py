"""Neural-network operators (convolution, pooling, matmul, normalisation)."""

/* The exaccel "accelerator": C (m x n) = A (m x k) . B (k x n), float32, row-major.
 * Shipped with the package and added to every build that uses the kind. */
#include <stdint.h>

void exaccel_matmul_f32(const float *a, const float *b, float *c, int32_t m, int32_t k, int32_t n);

void exaccel_matmul_f32(const float *a, const float *b, float *c, int32_t m, int32_t k, int32_t n) {
  for (int32_t i = 0; i < m; ++i) {
    for (int32_t j = 0; j < n; ++j) c[i * n + j] = 0.0f;
    for (int32_t p = 0; p < k; ++p) {
      const float av = a[i * k + p];
      for (int32_t j = 0; j < n; ++j) c[i * n + j] += av * b[p * n + j];
    }
  }
}

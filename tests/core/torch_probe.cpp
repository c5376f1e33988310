// Runs one libtorch computation, so that test_tokenizer proves libtorch and libsentencepiece
// work side by side in one process.
#include <ATen/ATen.h>

double servelab_test_torch_probe() {
  at::Tensor a = at::ones({2, 3});
  return at::matmul(a, at::ones({3, 1})).sum().item<double>();  // 2 rows x 3 = 6
}

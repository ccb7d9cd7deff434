// A row-major matrix A[r, c] is, to column-major cuBLAS, A^T with leading
// dimension c. So C = A B (row-major) is computed as C^T = B^T A^T.
#include "kernels/cuda/common.hpp"
#include "ops/linear/cuda.hpp"

namespace memfit::kernels::cuda {
namespace {

// y[m, n] += b[n]
__global__ void add_bias_k(float* y, const float* b, int64_t M, int64_t N) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < M * N; i += int64_t(gridDim.x) * blockDim.x)
    y[i] += b[i % N];
}

// db[n] = sum_m dy[m, n]: one thread per column, rows in order (a fixed
// summation order: the same bits every run).
__global__ void column_sums_k(const float* dy, float* db, int64_t M, int64_t N) {
  for (int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; n < N; n += int64_t(gridDim.x) * blockDim.x) {
    float acc = 0.0f;
    for (int64_t m = 0; m < M; ++m) acc += dy[m * N + n];
    db[n] = acc;
  }
}

void gemm(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
          const float* b, int64_t ldb, float* c, int64_t ldc) {
  const float one = 1.0f, zero = 0.0f;
  check(lib().cublasSgemm(context().blas, ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), &one, a,
                    static_cast<int>(lda), b, static_cast<int>(ldb), &zero, c, static_cast<int>(ldc)),
        "cublasSgemm");
}

class Linear final : public Kernel {
 public:
  explicit Linear(LinearParams p) : p_(p) {}
  const char* name() const override { return "cuda.linear"; }
  void run(const StepContext& ctx) override {
    // y^T[N, M] = w[N, K] x^T: w's buffer is w^T (K x N) to cuBLAS, so op T.
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, p_.N, p_.M, p_.K, in<float>(1), p_.K, in<float>(0), p_.K, out<float>(0), p_.N);
    if (p_.bias) {
      add_bias_k<<<blocks_for(p_.M * p_.N), kThreads, 0, queue(ctx)>>>(out<float>(0), in<float>(2), p_.M, p_.N);
      check(cudaGetLastError(), name());
    }
  }

 private:
  LinearParams p_;
};

class LinearBwdData final : public Kernel {
 public:
  explicit LinearBwdData(LinearParams p) : p_(p) {}
  const char* name() const override { return "cuda.linear_bwd_data"; }
  void run(const StepContext&) override {
    // dx^T[K, M] = w^T[K, N] dy^T[N, M]
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, p_.K, p_.M, p_.N, in<float>(1), p_.K, in<float>(0), p_.N, out<float>(0), p_.K);
  }

 private:
  LinearParams p_;
};

class LinearBwdWeight final : public Kernel {
 public:
  explicit LinearBwdWeight(LinearParams p) : p_(p) {}
  const char* name() const override { return "cuda.linear_bwd_weight"; }
  void run(const StepContext& ctx) override {
    // dw^T[K, N] = x^T[K, M] dy[M, N]
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, p_.K, p_.N, p_.M, in<float>(0), p_.K, in<float>(1), p_.N, out<float>(0), p_.K);
    if (p_.bias) {
      column_sums_k<<<blocks_for(p_.N), kThreads, 0, queue(ctx)>>>(in<float>(1), out<float>(1), p_.M, p_.N);
      check(cudaGetLastError(), name());
    }
  }

 private:
  LinearParams p_;
};

class Matmul final : public Kernel {
 public:
  explicit Matmul(MatmulParams p) : p_(p) {}
  const char* name() const override { return "cuda.matmul"; }
  void run(const StepContext&) override {
    const MatmulParams& p = p_;
    // c^T[N, M] = op(b)^T op(a)^T. b's buffer is op(b)^T to cuBLAS when b is
    // not transposed (op N, ld N), and op(b) when it is (op T, ld K); a's
    // likewise (op N with ld K, op T with ld M).
    const cublasOperation_t ob = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t oa = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int64_t ldb = p.trans_b ? p.K : p.N, lda = p.trans_a ? p.M : p.K;
    const float one = 1.0f, zero = 0.0f;
    check(lib().cublasSgemmStridedBatched(context().blas, ob, oa, static_cast<int>(p.N), static_cast<int>(p.M),
                                    static_cast<int>(p.K), &one, in<float>(1), static_cast<int>(ldb),
                                    p.b_batch == 1 ? 0 : p.K * p.N, in<float>(0), static_cast<int>(lda),
                                    p.a_batch == 1 ? 0 : p.M * p.K, &zero, out<float>(0), static_cast<int>(p.N),
                                    p.M * p.N, static_cast<int>(p.B)),
          "cublasSgemmStridedBatched");
  }

 private:
  MatmulParams p_;
};

}  // namespace

std::unique_ptr<Kernel> linear(const LinearParams& p) { return std::make_unique<Linear>(p); }
std::unique_ptr<Kernel> linear_bwd_data(const LinearParams& p) { return std::make_unique<LinearBwdData>(p); }
std::unique_ptr<Kernel> linear_bwd_weight(const LinearParams& p) { return std::make_unique<LinearBwdWeight>(p); }
std::unique_ptr<Kernel> matmul(const MatmulParams& p) { return std::make_unique<Matmul>(p); }

}  // namespace memfit::kernels::cuda

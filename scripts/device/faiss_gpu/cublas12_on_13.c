/* libcublas.so.12 for FAISS's CUDA 12 wheel on a host that has only CUDA 13's cuBLAS.
 *
 * PyPI's faiss-gpu-cu12 links libcublas.so.12 and libcublasLt.so.12; the GPU device image ships
 * CUDA 13 only, and cuBLAS 12 is a 581 MB wheel (ten device calls to carry). FAISS calls eight
 * cuBLAS functions, all with the same C signatures in cuBLAS 13, so this library exports exactly
 * those under the `libcublas.so.12` symbol version and forwards each to libcublas.so.13
 * (dlopen'ed on first use: INFERSCALE_CUBLAS13, else the loader's search path). Nothing else of
 * FAISS changes: its kernels, its CUDA 12 runtime (libcudart.so.12, carried) and its index code run
 * as shipped. Built by scripts/device/faiss_gpu/stage.sh; used only on the device.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int status_t;  /* cublasStatus_t */
typedef void *handle_t;  /* cublasHandle_t */
typedef void *stream_t;  /* cudaStream_t */

static void *cublas13(const char *name) {
  static void *lib;
  if (!lib) {
    const char *path = getenv("INFERSCALE_CUBLAS13");
    lib = dlopen(path && *path ? path : "libcublas.so.13", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
      fprintf(stderr, "cublas12_on_13: cannot load cuBLAS 13: %s\n", dlerror());
      abort();
    }
  }
  void *fn = dlsym(lib, name);
  if (!fn) {
    fprintf(stderr, "cublas12_on_13: cuBLAS 13 lacks %s\n", name);
    abort();
  }
  return fn;
}

#define FORWARD(name, params, args)                                   \
  status_t name params {                                              \
    static status_t(*fn) params;                                      \
    if (!fn) fn = (status_t(*) params)cublas13(#name);                \
    return fn args;                                                   \
  }

FORWARD(cublasCreate_v2, (handle_t *h), (h))
FORWARD(cublasDestroy_v2, (handle_t h), (h))
FORWARD(cublasSetStream_v2, (handle_t h, stream_t s), (h, s))
FORWARD(cublasGetMathMode, (handle_t h, int *mode), (h, mode))

/* cuBLAS 13 may refuse the deprecated CUBLAS_TENSOR_OP_MATH (1) that FAISS asks for around
 * half-precision GEMMs; the default mode already uses tensor cores there, so fall back to it. */
status_t cublasSetMathMode(handle_t h, int mode) {
  static status_t (*fn)(handle_t, int);
  if (!fn) fn = (status_t(*)(handle_t, int))cublas13("cublasSetMathMode");
  status_t status = fn(h, mode);
  if (status != 0 && mode == 1) status = fn(h, 0);
  return status;
}

FORWARD(cublasSgemmEx,
        (handle_t h, int ta, int tb, int m, int n, int k, const float *alpha, const void *A,
         int Atype, int lda, const void *B, int Btype, int ldb, const float *beta, void *C,
         int Ctype, int ldc),
        (h, ta, tb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc))
FORWARD(cublasGemmEx,
        (handle_t h, int ta, int tb, int m, int n, int k, const void *alpha, const void *A,
         int Atype, int lda, const void *B, int Btype, int ldb, const void *beta, void *C,
         int Ctype, int ldc, int computeType, int algo),
        (h, ta, tb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc,
         computeType, algo))
FORWARD(cublasGemmStridedBatchedEx,
        (handle_t h, int ta, int tb, int m, int n, int k, const void *alpha, const void *A,
         int Atype, int lda, long long strideA, const void *B, int Btype, int ldb,
         long long strideB, const void *beta, void *C, int Ctype, int ldc, long long strideC,
         int batchCount, int computeType, int algo),
        (h, ta, tb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta, C,
         Ctype, ldc, strideC, batchCount, computeType, algo))

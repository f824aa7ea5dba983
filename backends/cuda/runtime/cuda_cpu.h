/* xmge: run generated CUDA source on the CPU (tests without a GPU).
 *
 * Compiled with g++ as C++17 in place of <cuda_runtime.h>. A launch runs the grid's blocks one after
 * another; a block's threads run one after another too. Kernels launched with XM_LAUNCH_SYNC use
 * __syncthreads: each of their threads is a ucontext fiber that yields to the block's scheduler at
 * every barrier, and the scheduler runs every fiber up to the barrier before any goes past it (the
 * CUDA rule). __shared__ variables are function statics, shared by the fibers of a block (blocks never
 * overlap). Warp-collective WMMA operations are executed whole by every thread of the warp on
 * fragments that hold the whole tile, which gives the documented result whatever the (unspecified)
 * distribution of a fragment over the warp's lanes. Device memory is host memory.
 */
#ifndef XM_CUDA_CPU_H
#define XM_CUDA_CPU_H
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
inline dim3 threadIdx, blockIdx, blockDim, gridDim;

/* -- launches ------------------------------------------------------------------------------- */
template <class F>
void xm_cpu_launch(dim3 grid, dim3 block, F body) {
  gridDim = grid;
  blockDim = block;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        blockIdx = dim3(bx, by, bz);
        for (unsigned tz = 0; tz < block.z; ++tz)
          for (unsigned ty = 0; ty < block.y; ++ty)
            for (unsigned tx = 0; tx < block.x; ++tx) {
              threadIdx = dim3(tx, ty, tz);
              body();
            }
      }
}

struct xm_fiber {
  ucontext_t ctx;
  dim3 tid;
  bool done;
};
inline ucontext_t xm_scheduler;
inline xm_fiber* xm_current = nullptr;
inline void (*xm_fiber_entry)(void*) = nullptr;
inline void* xm_fiber_arg = nullptr;

inline void xm_fiber_main() {
  xm_fiber_entry(xm_fiber_arg);
  xm_current->done = true; /* returning resumes the scheduler (uc_link) */
}

inline void __syncthreads() {
  if (xm_current) swapcontext(&xm_current->ctx, &xm_scheduler);
}
inline void __syncwarp(unsigned = 0xffffffffu) { __syncthreads(); }

template <class F>
void xm_cpu_launch_sync(dim3 grid, dim3 block, F body) {
  enum { kStack = 256 * 1024 };
  gridDim = grid;
  blockDim = block;
  const unsigned n = block.x * block.y * block.z;
  std::vector<xm_fiber> fibers(n);
  std::vector<char> stacks((size_t)n * kStack);
  xm_fiber_entry = [](void* f) { (*(F*)f)(); };
  xm_fiber_arg = &body;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        blockIdx = dim3(bx, by, bz);
        for (unsigned t = 0; t < n; ++t) {
          xm_fiber& f = fibers[t];
          f.tid = dim3(t % block.x, t / block.x % block.y, t / (block.x * block.y));
          f.done = false;
          getcontext(&f.ctx);
          f.ctx.uc_stack.ss_sp = &stacks[(size_t)t * kStack];
          f.ctx.uc_stack.ss_size = kStack;
          f.ctx.uc_link = &xm_scheduler;
          makecontext(&f.ctx, xm_fiber_main, 0);
        }
        for (bool running = true; running;) {
          running = false;
          for (unsigned t = 0; t < n; ++t) {
            xm_fiber& f = fibers[t];
            if (f.done) continue;
            xm_current = &f;
            threadIdx = f.tid;
            swapcontext(&xm_scheduler, &f.ctx);
            running |= !f.done;
          }
        }
        xm_current = nullptr;
      }
}

/* -- intrinsics ----------------------------------------------------------------------------- */
inline int __dp4a(int a, int b, int c) {
  for (int k = 0; k < 4; ++k) c += (int)(int8_t)(a >> (8 * k)) * (int)(int8_t)(b >> (8 * k));
  return c;
}
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __frcp_rn(float a) { return 1.f / a; }
template <class T> inline T __ldg(const T* p) { return *p; }

/* IEEE binary16, round to nearest even (as __float2half) */
struct __half {
  uint16_t bits;
};
inline __half __float2half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mag = x & 0x7fffffffu;
  __half h;
  if (mag >= 0x7f800000u) { /* inf or nan */
    h.bits = (uint16_t)(sign | 0x7c00u | (mag > 0x7f800000u ? 0x200u : 0u));
    return h;
  }
  if (mag >= 0x477ff000u) { /* rounds to >= 65520: inf */
    h.bits = (uint16_t)(sign | 0x7c00u);
    return h;
  }
  if (mag < 0x38800000u) { /* subnormal half (or zero): scale into the integer grid, round even */
    float a;
    memcpy(&a, &mag, 4);
    const float scaled = a * 16777216.f; /* 2^24: one unit is the smallest subnormal */
    h.bits = (uint16_t)(sign | (uint32_t)nearbyintf(scaled));
    return h;
  }
  const uint32_t exp_adj = mag - 0x38000000u; /* rebias 127 -> 15 */
  uint32_t r = exp_adj >> 13;
  const uint32_t rest = exp_adj & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (r & 1u))) ++r;
  h.bits = (uint16_t)(sign | r);
  return h;
}
inline float __half2float(__half h) {
  const uint32_t sign = (uint32_t)(h.bits & 0x8000u) << 16;
  const uint32_t e = (h.bits >> 10) & 0x1fu, m = h.bits & 0x3ffu;
  uint32_t x;
  if (e == 0) {
    const float v = (float)m * (1.f / 16777216.f);
    memcpy(&x, &v, 4);
    x |= sign;
  } else if (e == 31) {
    x = sign | 0x7f800000u | (m << 13);
  } else {
    x = sign | ((e + 112u) << 23) | (m << 13);
  }
  float f;
  memcpy(&f, &x, 4);
  return f;
}
typedef __half half;

/* -- WMMA (nvcuda::wmma), whole tiles per thread --------------------------------------------- */
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K> struct tile_rows;
template <int M, int N, int K> struct tile_rows<matrix_a, M, N, K> { enum { r = M, c = K }; };
template <int M, int N, int K> struct tile_rows<matrix_b, M, N, K> { enum { r = K, c = N }; };
template <int M, int N, int K> struct tile_rows<accumulator, M, N, K> { enum { r = M, c = N }; };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  enum { rows = tile_rows<Use, M, N, K>::r, cols = tile_rows<Use, M, N, K>::c, num_elements = rows * cols };
  T x[num_elements]; /* row-major tile */
};

inline float xm_wmma_value(float v) { return v; }
inline float xm_wmma_value(__half v) { return __half2float(v); }
inline int xm_wmma_value(signed char v) { return v; }
inline int xm_wmma_value(unsigned char v) { return v; }
inline int xm_wmma_value(int v) { return v; }
template <class T> inline T xm_wmma_store(float v);
template <> inline float xm_wmma_store<float>(float v) { return v; }
template <> inline __half xm_wmma_store<__half>(float v) { return __float2half(v); }

template <class Use, int M, int N, int K, class T, class L, class V>
inline void fill_fragment(fragment<Use, M, N, K, T, L>& f, V v) {
  for (int i = 0; i < f.num_elements; ++i) f.x[i] = (T)v;
}
template <class Use, int M, int N, int K, class T>
inline void load_matrix_sync(fragment<Use, M, N, K, T, row_major>& f, const T* p, unsigned ldm) {
  for (int r = 0; r < f.rows; ++r)
    for (int c = 0; c < f.cols; ++c) f.x[r * f.cols + c] = p[(size_t)r * ldm + c];
}
template <class Use, int M, int N, int K, class T>
inline void load_matrix_sync(fragment<Use, M, N, K, T, col_major>& f, const T* p, unsigned ldm) {
  for (int r = 0; r < f.rows; ++r)
    for (int c = 0; c < f.cols; ++c) f.x[r * f.cols + c] = p[(size_t)c * ldm + r];
}
template <int M, int N, int K, class T>
inline void load_matrix_sync(fragment<accumulator, M, N, K, T, void>& f, const T* p, unsigned ldm, layout_t l) {
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c) f.x[r * N + c] = l == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
}
template <int M, int N, int K, class T>
inline void store_matrix_sync(T* p, const fragment<accumulator, M, N, K, T, void>& f, unsigned ldm, layout_t l) {
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c) (l == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]) = f.x[r * N + c];
}
/* D = A * B + C: integer products accumulate exactly in int32; half products in float32, rounded once
 * to the accumulator type */
template <int M, int N, int K, class TA, class LA, class LB, class TC>
inline void mma_sync(fragment<accumulator, M, N, K, TC, void>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
                     const fragment<matrix_b, M, N, K, TA, LB>& b, const fragment<accumulator, M, N, K, TC, void>& c) {
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      auto acc = xm_wmma_value(c.x[i * N + j]);
      for (int k = 0; k < K; ++k) acc += xm_wmma_value(a.x[i * K + k]) * xm_wmma_value(b.x[k * N + j]);
      if constexpr (sizeof(TC) == 2) d.x[i * N + j] = xm_wmma_store<TC>((float)acc);
      else d.x[i * N + j] = (TC)acc;
    }
}
}  // namespace wmma
}  // namespace nvcuda

/* -- the runtime API the xmge runtime calls ------------------------------------------------- */
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorMemoryAllocation = 2 };
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
typedef struct xm_cpu_stream* cudaStream_t;
inline cudaError_t cudaMalloc(void** p, size_t n) {
  *p = aligned_alloc(256, (n + 255) / 256 * 256 + 256);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
inline cudaError_t cudaFree(void* p) { free(p); return cudaSuccess; }
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) { if (n) memcpy(d, s, n); return cudaSuccess; }
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t) { return cudaMemcpy(d, s, n, k); }
inline cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t) { memset(d, v, n); return cudaSuccess; }
inline cudaError_t cudaStreamCreate(cudaStream_t* s) { *s = nullptr; return cudaSuccess; }
inline cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaGetLastError(void) { return cudaSuccess; }
inline const char* cudaGetErrorString(cudaError_t) { return "no error (CPU harness)"; }
#endif

/* xmge: what generated CUDA kernels share (included first by every generated model.cu).
 *
 * With nvcc this is CUDA; with g++ the same source runs on the CPU through cuda_cpu.h. Launches go
 * through XM_LAUNCH (no barriers) or XM_LAUNCH_SYNC (kernels that call __syncthreads), on the stream
 * the runtime sets before each run.
 */
#ifndef XM_KERNELS_H
#define XM_KERNELS_H
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__CUDACC__)
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>
#define XM_LAUNCH(kernel, grid, block, ...) kernel<<<(grid), (block), 0, xm_stream>>>(__VA_ARGS__)
#define XM_LAUNCH_SYNC(kernel, grid, block, ...) kernel<<<(grid), (block), 0, xm_stream>>>(__VA_ARGS__)
#else
#include "cuda_cpu.h"
#define XM_LAUNCH(kernel, grid, block, ...) xm_cpu_launch((grid), (block), [&]() { kernel(__VA_ARGS__); })
#define XM_LAUNCH_SYNC(kernel, grid, block, ...) \
  xm_cpu_launch_sync((grid), (block), [&]() { kernel(__VA_ARGS__); })
#endif
#include "xm_runtime.h"

/* the stream of the run in progress on this thread (xm_cuda_runtime.cu), prefixed like every exported
   symbol of the model */
#define xm_stream XM_SYM(stream)
extern thread_local cudaStream_t xm_stream;

static __host__ __device__ __forceinline__ float xm_act_identity(float v) { return v; }
static __host__ __device__ __forceinline__ float xm_act_relu(float v) { return v > 0.f ? v : 0.f; }
static __host__ __device__ __forceinline__ float xm_act_sigmoid(float v) { return 1.f / (1.f + expf(-v)); }
static __host__ __device__ __forceinline__ float xm_act_hswish(float v) {
  return v * fminf(fmaxf(v + 3.f, 0.f), 6.f) / 6.f;
}
static __host__ __device__ __forceinline__ float xm_act_relu6(float v) { return fminf(fmaxf(v, 0.f), 6.f); }
/* int8 requantization: the C backends' one definition (backends/c/templates/requant.py), emitted
   into model.cu by the kernels that use it */
static __host__ __device__ __forceinline__ int xm_blocks(long n, int block) { return (int)((n + block - 1) / block); }
#endif

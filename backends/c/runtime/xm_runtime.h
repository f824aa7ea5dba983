/* xmge runtime of one compiled model: the prefixed entry points behind P_api() (xm_api.h).
 *
 * Compile model.c, xm_runtime.c, xm_parallel.c (the kernels' threads: without it, -fopenmp links libgomp)
 * (and runner.c) with -DXM_PREFIX=P; model.c names its own prefix too
 * (`#define XM_PREFIX P`, used when no -D is given). Then the library exports only P_api, P_create,
 * P_run, P_run_variant, P_find_variant, P_run_shaped, P_last_error, P_destroy, P_num_arenas, P_desc
 * (the variant table model.c defines) and, in profiling builds, P_profile. Within this model's own
 * sources the short names below (xm_create, xm_run, ...) stand for the prefixed ones.
 *
 *   xm_model* m = xm_create(weights, weights_size, threads, 0);   // allocates the weights and 1 arena
 *   xm_run(m, inputs, outputs);             // 0, else xm_last_error() (this thread's) says why
 *   xm_destroy(m);
 *
 * Concurrency contract. Any number of threads may call xm_run* on one instance at once; each call gets
 * an arena of its own from the instance's pool (a mutex-protected free list): a call takes a free arena,
 * or allocates a new one when all are busy and the pool holds fewer than max_arenas, or else waits for
 * one. A single caller therefore never allocates after create; the pool grows only on first contention
 * and keeps its arenas until destroy. Per-call state (the run's failure flag and message) lives in a
 * context on the caller's stack, handed to the generated code and to every kernel that can fail, so an
 * index error on one thread never fails another thread's call; the message is copied to the calling
 * thread's xm_last_error(). The weights are shared read-only.
 *
 * Pool bound: max_arenas <= 0 means XM_DEFAULT_MAX_ARENAS; max_arenas = 1 serialises calls on the
 * instance (the others wait on a condition variable). Measured: a ResNet-style model (3x3 stem, two
 * basic blocks, the second strided with a 1x1 projection, pooling, linear head), x86 AVX2, 1 OpenMP
 * thread per call, C callers on one instance, best of 3 wall-clock runs/s (tests/
 * test_runtime_reentrant.py::test_pool_vs_serialised_throughput, on a shared 2-core machine loaded by
 * other builds: load average ~2; CPU time per run stayed the same in every row):
 *                                      1 caller   2 callers   4 callers
 *     16 channels, 1x3x32x32  pool       2941       5764        5028
 *                             serial     2941       2918        2898
 *      8 channels, 1x3x16x16  pool      21978      18957       28571
 *                             serial    23810      23529       21053
 * A pooled instance scales with the free cores; a serialised one cannot, and the pool costs nothing
 * for a single caller (no extra allocation, one uncontended mutex per call). So the pool is the
 * default, at the price of one arena per concurrent caller.
 *
 * Threads on a shared machine. An instance created with threads > 1 times its runs and, per variant,
 * runs with all its threads or with one, whichever the median of its recent runs on each measured
 * faster (up to 9 runs of the arm in use, 3 of a try; one thread only when 5% faster; an all-threads
 * run right after a one-thread run, whose workers slept, is not counted). It tries the other now
 * and then (32 runs after a change of choice, twice as long after each try that lost, at most 512;
 * 8 runs measured worse: under a load of 5 on 2 cores its tries cost 1.5x in latency), so it follows
 * the load: a CPU-bound job on the other core never makes two threads slower than one for long. The
 * outputs do not depend on the choice (every kernel's result is the same at any thread count).
 * XMGE_ADAPT_THREADS=0 in the environment at create time: always all threads.
 */
#ifndef XM_RUNTIME_H
#define XM_RUNTIME_H
#include <stddef.h>

#include "xm_api.h"

#ifndef XM_PREFIX
#define XM_PREFIX xmge_model
#endif
#define XM_SYM_(p, n) p##_##n
#define XM_SYM2(p, n) XM_SYM_(p, n)
#define XM_SYM(n) XM_SYM2(XM_PREFIX, n)
#define XM_STR_(x) #x
#define XM_STR(x) XM_STR_(x)

#define XM_DEFAULT_MAX_ARENAS 64

#ifdef __cplusplus
extern "C" {
#endif

/* what model.c defines: its variants and the size of the weights blob they slice */
typedef struct {
  int num_variants;
  const xm_variant* variants;
  unsigned long weights_size;
} xm_model_desc;

/* one call in flight: kernels on any (OpenMP) thread claim `failed` atomically; the first writes the
   message; the caller reads both after the run's parallel regions have joined */
struct xm_ctx {
  int failed;
  char error[256];
};

#define xm_desc XM_SYM(desc)
#define xm_api_get XM_SYM(api)
#define xm_create XM_SYM(create)
#define xm_run XM_SYM(run)
#define xm_run_variant XM_SYM(run_variant)
#define xm_find_variant XM_SYM(find_variant)
#define xm_run_shaped XM_SYM(run_shaped)
#define xm_last_error XM_SYM(last_error)
#define xm_destroy XM_SYM(destroy)
#define xm_num_arenas XM_SYM(num_arenas)

extern const xm_model_desc xm_desc;
const xm_api* xm_api_get(void);
xm_model* xm_create(const void* weights, unsigned long weights_size, int threads, int max_arenas);
/* 0 on success; nonzero when the run failed, with the reason in xm_last_error(): a kernel met an index
   out of range (the run still completes without touching memory outside any tensor, but its outputs
   are not the model's answer) or, on CUDA, a runtime call failed */
int xm_run(xm_model* m, const void* const* inputs, void* const* outputs);
int xm_run_variant(xm_model* m, int variant, const void* const* inputs, void* const* outputs);
int xm_find_variant(int num_inputs, const xm_shape* shapes);
int xm_run_shaped(xm_model* m, const xm_shape* shapes, const void* const* inputs, void* const* outputs);
const char* xm_last_error(void);
void xm_destroy(xm_model* m);
int xm_num_arenas(const xm_model* m);

#ifdef __cplusplus
}
#endif

/* called by a generated kernel (any thread) on an index outside [-size, size): the first one of a call
   becomes that call's error, naming the kernel */
#include <stdio.h>
static inline void xm_index_error(xm_ctx* ctx, const char* kernel, long index, long size) {
  if (__atomic_exchange_n(&ctx->failed, 1, __ATOMIC_ACQ_REL)) return;
  snprintf(ctx->error, sizeof ctx->error, "%s: index %ld is out of range for an axis of size %ld", kernel, index,
           size);
}
#endif

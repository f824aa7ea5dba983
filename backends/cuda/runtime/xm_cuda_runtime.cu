/* xmge CUDA runtime: one device copy of the weights, one device arena (the largest variant's) and device
 * I/O buffers per model instance, uploaded once; a stream per instance. xm_run takes host buffers:
 * inputs are copied in, the generated launches run on the stream, outputs are copied back (the C API of
 * xm_api.h / xm_runtime.h, so the same runner and loader serve both).
 *
 * Concurrency: calls on one instance are serialised (its device buffers and stream serve one run at a
 * time; create an instance per concurrent caller to overlap runs). The stream of the run in progress
 * and the error message are per thread. The CPU harness (g++, cuda_cpu.h) emulates thread and block
 * indices in process-wide variables, so there every call in the process is serialised. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "xm_kernels.h"
#include "xm_select.h"

thread_local cudaStream_t xm_stream;

#define XM_CUDA_MAX_IO 64

struct xm_model {
  unsigned char* arena;
  unsigned char* weights;
  void* in[XM_CUDA_MAX_IO];
  void* out[XM_CUDA_MAX_IO];
  cudaStream_t stream;
  pthread_mutex_t lock;
};

static thread_local char xm_error[320];
#if !defined(__CUDACC__)
static pthread_mutex_t xm_harness_lock = PTHREAD_MUTEX_INITIALIZER;
#endif

extern "C" const char* xm_last_error(void) { return xm_error; }

static int xm_check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return 0;
  snprintf(xm_error, sizeof xm_error, "%s: %s", what, cudaGetErrorString(e));
  return -1;
}

extern "C" xm_model* xm_create(const void* weights, unsigned long weights_size, int threads, int max_arenas) {
  (void)threads;
  (void)max_arenas;
  if (weights_size != xm_desc.weights_size) {
    snprintf(xm_error, sizeof xm_error, "weights blob has %lu bytes, the model expects %lu", weights_size,
             xm_desc.weights_size);
    return NULL;
  }
  unsigned long arena = 0, in_bytes[XM_CUDA_MAX_IO] = {0}, out_bytes[XM_CUDA_MAX_IO] = {0};
  int n_in = 0, n_out = 0;
  for (int k = 0; k < xm_desc.num_variants; ++k) {
    const xm_variant* v = &xm_desc.variants[k];
    if (v->num_inputs > XM_CUDA_MAX_IO || v->num_outputs > XM_CUDA_MAX_IO) {
      snprintf(xm_error, sizeof xm_error, "more than %d model inputs or outputs", XM_CUDA_MAX_IO);
      return NULL;
    }
    if (v->arena_size > arena) arena = v->arena_size;
    if (v->num_inputs > n_in) n_in = v->num_inputs;
    if (v->num_outputs > n_out) n_out = v->num_outputs;
    for (int i = 0; i < v->num_inputs; ++i)
      if (v->inputs[i].nbytes > in_bytes[i]) in_bytes[i] = v->inputs[i].nbytes;
    for (int i = 0; i < v->num_outputs; ++i)
      if (v->outputs[i].nbytes > out_bytes[i]) out_bytes[i] = v->outputs[i].nbytes;
  }
  xm_model* m = (xm_model*)calloc(1, sizeof *m);
  if (!m) return NULL;
  pthread_mutex_init(&m->lock, NULL);
  int bad = xm_check(cudaStreamCreate(&m->stream), "cudaStreamCreate");
  bad = bad || xm_check(cudaMalloc((void**)&m->arena, arena ? arena : 256), "cudaMalloc(arena)");
  bad = bad || xm_check(cudaMalloc((void**)&m->weights, weights_size ? weights_size : 256), "cudaMalloc(weights)");
  for (int i = 0; !bad && i < n_in; ++i)
    bad = xm_check(cudaMalloc(&m->in[i], in_bytes[i]), "cudaMalloc(input)");
  for (int i = 0; !bad && i < n_out; ++i)
    bad = xm_check(cudaMalloc(&m->out[i], out_bytes[i]), "cudaMalloc(output)");
  if (!bad && weights_size)
    bad = xm_check(cudaMemcpy(m->weights, weights, weights_size, cudaMemcpyHostToDevice), "upload weights");
  if (bad) {
    xm_destroy(m);
    return NULL;
  }
  return m;
}

static int xm_run_locked(xm_model* m, const xm_variant* v, const void* const* inputs, void* const* outputs) {
  for (int i = 0; i < v->num_inputs; ++i)
    if (xm_check(cudaMemcpyAsync(m->in[i], inputs[i], v->inputs[i].nbytes, cudaMemcpyHostToDevice, m->stream),
                 "copy input"))
      return -1;
  xm_stream = m->stream;
  xm_ctx ctx;
  ctx.failed = 0;
  ctx.error[0] = 0;
  v->impl(m->in, m->out, m->arena, m->weights + v->weights_offset, 1, &ctx);
  if (xm_check(cudaGetLastError(), "kernel launch")) return -1;
  for (int i = 0; i < v->num_outputs; ++i)
    if (xm_check(cudaMemcpyAsync(outputs[i], m->out[i], v->outputs[i].nbytes, cudaMemcpyDeviceToHost, m->stream),
                 "copy output"))
      return -1;
  if (xm_check(cudaStreamSynchronize(m->stream), "run")) return -1;
  if (ctx.failed) {
    snprintf(xm_error, sizeof xm_error, "%s", ctx.error);
    return 1;
  }
  return 0;
}

extern "C" int xm_run_variant(xm_model* m, int variant, const void* const* inputs, void* const* outputs) {
  if (!m) {
    snprintf(xm_error, sizeof xm_error, "no model instance (create failed?)");
    return -1;
  }
  if (variant < 0 || variant >= xm_desc.num_variants) {
    snprintf(xm_error, sizeof xm_error, "variant %d does not exist: the library holds %d", variant,
             xm_desc.num_variants);
    return -1;
  }
#if !defined(__CUDACC__)
  pthread_mutex_lock(&xm_harness_lock);
#endif
  pthread_mutex_lock(&m->lock);
  const int rc = xm_run_locked(m, &xm_desc.variants[variant], inputs, outputs);
  pthread_mutex_unlock(&m->lock);
#if !defined(__CUDACC__)
  pthread_mutex_unlock(&xm_harness_lock);
#endif
  return rc;
}

extern "C" int xm_run(xm_model* m, const void* const* inputs, void* const* outputs) {
  return xm_run_variant(m, 0, inputs, outputs);
}

extern "C" int xm_find_variant(int num_inputs, const xm_shape* shapes) {
  return xm_select_variant(&xm_desc, num_inputs, shapes, xm_error, sizeof xm_error);
}

extern "C" int xm_run_shaped(xm_model* m, const xm_shape* shapes, const void* const* inputs, void* const* outputs) {
  const int v = xm_find_variant(xm_desc.num_variants ? xm_desc.variants[0].num_inputs : 0, shapes);
  return v < 0 ? -1 : xm_run_variant(m, v, inputs, outputs);
}

extern "C" int xm_num_arenas(const xm_model* m) { return m ? 1 : 0; }

extern "C" void xm_destroy(xm_model* m) {
  if (!m) return;
  for (int i = 0; i < XM_CUDA_MAX_IO; ++i) {
    if (m->in[i]) cudaFree(m->in[i]);
    if (m->out[i]) cudaFree(m->out[i]);
  }
  if (m->arena) cudaFree(m->arena);
  if (m->weights) cudaFree(m->weights);
  if (m->stream) cudaStreamDestroy(m->stream);
  pthread_mutex_destroy(&m->lock);
  free(m);
}

extern "C" const xm_api* xm_api_get(void) {
  /* C++: a function-local static is initialised once, thread-safely */
  static const xm_api api = {
      XM_ABI_VERSION, XM_STR(XM_PREFIX), "cuda", xm_desc.weights_size, xm_desc.num_variants, xm_desc.variants,
      xm_create, xm_run, xm_run_variant, xm_find_variant, xm_run_shaped, xm_last_error, xm_destroy,
      xm_num_arenas,
  };
  return &api;
}

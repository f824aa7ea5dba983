/* xmge CUDA runtime: one device arena (the static memory plan) and one device copy of the weights per
 * model instance, uploaded once; a stream per instance. xm_run takes host buffers: inputs are copied
 * in, the generated launches run on the stream, outputs are copied back (the same C API as the C
 * backends' runtime, so the same runner and loader serve both). */
#include <stdio.h>
#include <stdlib.h>

#include "xm_kernels.h"

cudaStream_t xm_stream;

struct xm_model {
  unsigned char* arena;
  unsigned char* weights;
  void* in[64];
  void* out[64];
  cudaStream_t stream;
};

static char xm_error[256];

extern "C" const char* xm_last_error(void) { return xm_error; }

static int xm_check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return 0;
  snprintf(xm_error, sizeof xm_error, "%s: %s", what, cudaGetErrorString(e));
  return -1;
}

extern "C" xm_model* xm_create(const void* weights, unsigned long weights_size, int threads) {
  (void)threads;
  if (weights_size != xm_weights_size) {
    snprintf(xm_error, sizeof xm_error, "weights blob has %lu bytes, the model expects %lu", weights_size,
             xm_weights_size);
    return NULL;
  }
  if (xm_num_inputs > 64 || xm_num_outputs > 64) {
    snprintf(xm_error, sizeof xm_error, "more than 64 model inputs or outputs");
    return NULL;
  }
  xm_model* m = (xm_model*)calloc(1, sizeof *m);
  if (!m) return NULL;
  int bad = xm_check(cudaStreamCreate(&m->stream), "cudaStreamCreate");
  bad = bad || xm_check(cudaMalloc((void**)&m->arena, xm_arena_size ? xm_arena_size : 256), "cudaMalloc(arena)");
  bad = bad || xm_check(cudaMalloc((void**)&m->weights, xm_weights_size ? xm_weights_size : 256), "cudaMalloc(weights)");
  for (int i = 0; !bad && i < xm_num_inputs; ++i)
    bad = xm_check(cudaMalloc(&m->in[i], xm_inputs[i].nbytes), "cudaMalloc(input)");
  for (int i = 0; !bad && i < xm_num_outputs; ++i)
    bad = xm_check(cudaMalloc(&m->out[i], xm_outputs[i].nbytes), "cudaMalloc(output)");
  if (!bad && xm_weights_size)
    bad = xm_check(cudaMemcpy(m->weights, weights, xm_weights_size, cudaMemcpyHostToDevice), "upload weights");
  if (bad) {
    xm_destroy(m);
    return NULL;
  }
  return m;
}

extern "C" int xm_run(xm_model* m, const void* const* inputs, void* const* outputs) {
  if (!m) return -1;
  for (int i = 0; i < xm_num_inputs; ++i)
    if (xm_check(cudaMemcpyAsync(m->in[i], inputs[i], xm_inputs[i].nbytes, cudaMemcpyHostToDevice, m->stream),
                 "copy input"))
      return -1;
  xm_stream = m->stream;
  xm_model_run_impl(m->in, m->out, m->arena, m->weights, 1);
  if (xm_check(cudaGetLastError(), "kernel launch")) return -1;
  for (int i = 0; i < xm_num_outputs; ++i)
    if (xm_check(cudaMemcpyAsync(outputs[i], m->out[i], xm_outputs[i].nbytes, cudaMemcpyDeviceToHost, m->stream),
                 "copy output"))
      return -1;
  return xm_check(cudaStreamSynchronize(m->stream), "run");
}

extern "C" void xm_destroy(xm_model* m) {
  if (!m) return;
  for (int i = 0; i < 64; ++i) {
    if (m->in[i]) cudaFree(m->in[i]);
    if (m->out[i]) cudaFree(m->out[i]);
  }
  if (m->arena) cudaFree(m->arena);
  if (m->weights) cudaFree(m->weights);
  if (m->stream) cudaStreamDestroy(m->stream);
  free(m);
}

extern "C" int xm_get_num_inputs(void) { return xm_num_inputs; }
extern "C" int xm_get_num_outputs(void) { return xm_num_outputs; }
extern "C" const xm_tensor_info* xm_get_input(int i) { return i >= 0 && i < xm_num_inputs ? &xm_inputs[i] : NULL; }
extern "C" const xm_tensor_info* xm_get_output(int i) { return i >= 0 && i < xm_num_outputs ? &xm_outputs[i] : NULL; }
extern "C" unsigned long xm_get_arena_size(void) { return xm_arena_size; }
extern "C" unsigned long xm_get_weights_size(void) { return xm_weights_size; }

/* xmge runtime: one aligned arena and one aligned copy of the weights per model instance. */
#include "xm_runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct xm_model {
  unsigned char* arena;
  unsigned char* weights;
  int threads;
};

static char xm_error[256];
/* set by the first xm_index_error of a run (kernels run on OpenMP threads: claimed atomically) */
static int xm_failed;

const char* xm_last_error(void) { return xm_error; }

static void* xm_alloc(unsigned long n) {
  /* 64-byte alignment: the planner aligns every buffer to 64 and kernels use aligned vector loads */
  unsigned long size = (n + 63) / 64 * 64;
  return aligned_alloc(64, size ? size : 64);
}

xm_model* xm_create(const void* weights, unsigned long weights_size, int threads) {
  if (weights_size != xm_weights_size) {
    snprintf(xm_error, sizeof xm_error, "weights blob has %lu bytes, the model expects %lu", weights_size,
             xm_weights_size);
    return NULL;
  }
  xm_model* m = (xm_model*)calloc(1, sizeof *m);
  if (!m) return NULL;
  m->arena = (unsigned char*)xm_alloc(xm_arena_size);
  m->weights = (unsigned char*)xm_alloc(xm_weights_size);
  if (!m->arena || !m->weights) {
    xm_destroy(m);
    snprintf(xm_error, sizeof xm_error, "out of memory");
    return NULL;
  }
  if (xm_weights_size) memcpy(m->weights, weights, xm_weights_size);
  m->threads = threads > 0 ? threads : xm_default_threads;
  return m;
}

void xm_index_error(const char* kernel, long index, long size) {
  if (__atomic_exchange_n(&xm_failed, 1, __ATOMIC_ACQ_REL)) return;
  snprintf(xm_error, sizeof xm_error, "%s: index %ld is out of range for an axis of size %ld", kernel, index,
           size);
}

int xm_run(xm_model* m, const void* const* inputs, void* const* outputs) {
  if (!m) return -1;
  __atomic_store_n(&xm_failed, 0, __ATOMIC_RELEASE);
  xm_model_run_impl((void* const*)inputs, outputs, m->arena, m->weights, m->threads);
  return __atomic_load_n(&xm_failed, __ATOMIC_ACQUIRE) ? 1 : 0;
}

void xm_destroy(xm_model* m) {
  if (!m) return;
  free(m->arena);
  free(m->weights);
  free(m);
}

int xm_get_num_inputs(void) { return xm_num_inputs; }
int xm_get_num_outputs(void) { return xm_num_outputs; }
const xm_tensor_info* xm_get_input(int i) { return i >= 0 && i < xm_num_inputs ? &xm_inputs[i] : NULL; }
const xm_tensor_info* xm_get_output(int i) { return i >= 0 && i < xm_num_outputs ? &xm_outputs[i] : NULL; }
unsigned long xm_get_arena_size(void) { return xm_arena_size; }
unsigned long xm_get_weights_size(void) { return xm_weights_size; }

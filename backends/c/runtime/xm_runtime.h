/* xmge runtime: load a compiled model's weights, run it, free it.
 *
 *   xm_model* m = xm_create(weights, weights_size, threads);   // the only allocations
 *   xm_run(m, inputs, outputs);                                // no allocation, reentrant per model
 *                                                              // 0, else xm_last_error() says why
 *   xm_destroy(m);
 *
 * Inputs and outputs are caller-owned buffers, dense row-major, of the sizes in xm_inputs[] /
 * xm_outputs[]; the model reads inputs in place and writes outputs directly.
 */
#ifndef XM_RUNTIME_H
#define XM_RUNTIME_H
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  const char* name;
  const char* dtype;
  int ndim;
  long shape[8];
  unsigned long nbytes;
} xm_tensor_info;

typedef struct xm_model xm_model;

/* generated per model (model.c) */
extern const int xm_num_inputs;
extern const int xm_num_outputs;
extern const xm_tensor_info xm_inputs[];
extern const xm_tensor_info xm_outputs[];
extern const unsigned long xm_arena_size;
extern const unsigned long xm_weights_size;
extern const int xm_default_threads;
void xm_model_run_impl(void* const* in, void* const* out, unsigned char* arena, const unsigned char* weights,
                       int nt);

/* runtime (xm_runtime.c) */
xm_model* xm_create(const void* weights, unsigned long weights_size, int threads);
/* 0 on success; nonzero when the run failed, with the reason in xm_last_error(): a kernel met an index
   out of range (the run still completes without touching memory outside any tensor, but its outputs
   are not the model's answer) or, on CUDA, a runtime call failed */
int xm_run(xm_model* m, const void* const* inputs, void* const* outputs);
/* called by a generated kernel (any thread) on an index outside [-size, size): the first one of a run
   becomes xm_run's error, naming the kernel */
void xm_index_error(const char* kernel, long index, long size);
void xm_destroy(xm_model* m);
const char* xm_last_error(void);
int xm_get_num_inputs(void);
int xm_get_num_outputs(void);
const xm_tensor_info* xm_get_input(int i);
const xm_tensor_info* xm_get_output(int i);
unsigned long xm_get_arena_size(void);
unsigned long xm_get_weights_size(void);

#ifdef __cplusplus
}
#endif
#endif

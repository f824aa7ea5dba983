/* xmge: the generic C API of a compiled model (prefix-free; one header for every package).
 *
 * Every compiled model's exported symbols carry the model's prefix P (a C identifier chosen when it is
 * compiled, default `xmge_model`); its library is libP.so. Everything a host needs is reachable from one
 * entry point, a descriptor of metadata and function pointers:
 *
 *   const xm_api* P_api(void);                       // XM_DECLARE_API(P) declares it
 *
 * Loading any package by path:
 *
 *   void* h = dlopen("pkg/libP.so", RTLD_NOW | RTLD_LOCAL);
 *   const xm_api* api = xm_api_from_handle(h, "P");  // NULL: not an xmge library of this ABI
 *   xm_model* m = api->create(weights, weights_size, 0, 0);   // 0 threads: the compiled default
 *   if (!m) puts(api->last_error());
 *   const xm_variant* v = &api->variants[0];         // v->inputs[i].nbytes, .shape, .dtype, ...
 *   if (api->run(m, inputs, outputs)) puts(api->last_error());          // variant 0
 *   api->run_shaped(m, shapes, inputs, outputs);     // the variant whose input shapes are `shapes`
 *   api->destroy(m);
 *
 * Two models linked into one program (static objects or -lP1 -lP2): XM_DECLARE_API(P1);
 * XM_DECLARE_API(P2); then P1_api()->create(...) and P2_api()->create(...). No symbol of one model can
 * collide with or interpose another's: the only external symbols of a model are P_api and the P_*
 * functions of xm_runtime.h, and kernels are static.
 *
 * Variants: one library may hold several compiled variants of one model (one per input shape, e.g.
 * batch 1 and 4), each with its own I/O table, arena size and slice of the weights blob (offset and size
 * in the blob handed to create; variants with equal weights may share a slice). run picks variant 0;
 * run_variant a given one; run_shaped / find_variant the one whose inputs have exactly the given
 * shapes, failing with "... this library holds (1,3,224,224), (4,3,224,224)".
 *
 * Threads: create, run*, destroy and the getters are safe to call from any thread; any number of
 * threads may run one instance at once (see xm_runtime.h for the contract and measurements). Errors:
 * a nonzero return (or NULL from create) leaves the reason in last_error(), which is per calling
 * thread (like errno) and stays valid until that thread's next call into the same library.
 *
 * Buffers: inputs and outputs are caller-owned, dense row-major, of the variant's nbytes; the model
 * reads inputs in place and writes outputs directly. The weights blob is copied by create (64-byte
 * aligned) and may be freed after it returns.
 */
#ifndef XM_API_H
#define XM_API_H

#ifdef __cplusplus
extern "C" {
#endif

#define XM_ABI_VERSION 2
#define XM_MAX_DIMS 8

typedef struct {
  const char* name;
  const char* dtype; /* dialects/dtypes.py names: float32, float16, int8, int32, bool, qint8, ... */
  int ndim;
  long shape[XM_MAX_DIMS];
  unsigned long nbytes;
} xm_tensor_info;

/* the shape of one input handed to run_shaped / find_variant */
typedef struct {
  int ndim;
  long dims[XM_MAX_DIMS];
} xm_shape;

typedef struct xm_model xm_model; /* one loaded instance: weights, arena pool, thread count */
typedef struct xm_ctx xm_ctx;     /* one call in flight (internal: the run's failure flag and message) */

typedef struct {
  const char* name; /* "v0", "v1", ... */
  int num_inputs;
  int num_outputs;
  const xm_tensor_info* inputs;
  const xm_tensor_info* outputs;
  unsigned long arena_size;
  unsigned long weights_offset; /* this variant's slice of the weights blob (64-byte aligned) */
  unsigned long weights_size;
  int default_threads;
  /* internal: the generated run function (call run / run_variant instead) */
  void (*impl)(void* const* in, void* const* out, unsigned char* arena, const unsigned char* weights, int nt,
               xm_ctx* ctx);
} xm_variant;

typedef struct xm_api {
  unsigned abi_version; /* XM_ABI_VERSION of the runtime the library was built with */
  const char* prefix;   /* P */
  const char* runtime;  /* "c" or "cuda" */
  unsigned long weights_size; /* bytes create expects: the whole blob, every variant's slice */
  int num_variants;
  const xm_variant* variants;
  /* threads <= 0: the variant's compiled default; max_arenas <= 0: the runtime's default pool bound
     (xm_runtime.h), 1: calls on this instance run one at a time */
  xm_model* (*create)(const void* weights, unsigned long weights_size, int threads, int max_arenas);
  int (*run)(xm_model* m, const void* const* inputs, void* const* outputs);
  int (*run_variant)(xm_model* m, int variant, const void* const* inputs, void* const* outputs);
  /* index of the variant whose num_inputs input shapes are exactly `shapes`, else -1 (last_error lists
     the shapes the library holds) */
  int (*find_variant)(int num_inputs, const xm_shape* shapes);
  int (*run_shaped)(xm_model* m, const xm_shape* shapes, const void* const* inputs, void* const* outputs);
  const char* (*last_error)(void);
  void (*destroy)(xm_model* m);
  int (*num_arenas)(const xm_model* m); /* arenas the instance's pool holds now (diagnostics) */
} xm_api;

typedef const xm_api* (*xm_api_fn)(void);

#define XM_API_CAT_(a, b) a##b
#define XM_API_CAT(a, b) XM_API_CAT_(a, b)
/* declares P_api() of a model linked into this program (from C or C++) */
#ifdef __cplusplus
#define XM_DECLARE_API(prefix) extern "C" const xm_api* XM_API_CAT(prefix, _api)(void)
#else
#define XM_DECLARE_API(prefix) const xm_api* XM_API_CAT(prefix, _api)(void)
#endif

#ifdef __cplusplus
}
#endif

/* the descriptor of the library `handle` (dlopen) with prefix `prefix`, NULL when it has none or was
   built for another ABI version; define XM_API_NO_DLFCN to leave this helper out */
#ifndef XM_API_NO_DLFCN
#include <dlfcn.h>
#include <stdio.h>
static inline const xm_api* xm_api_from_handle(void* handle, const char* prefix) {
  char name[256];
  if (!handle || snprintf(name, sizeof name, "%s_api", prefix) >= (int)sizeof name) return 0;
  void* sym = dlsym(handle, name);
  if (!sym) return 0;
  xm_api_fn fn;
  *(void**)(&fn) = sym;
  const xm_api* api = fn();
  return api && api->abi_version == XM_ABI_VERSION ? api : 0;
}
#endif
#endif

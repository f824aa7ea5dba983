/* xmge: picking a variant by its input shapes; the one definition both runtimes (C and CUDA) use. */
#ifndef XM_SELECT_H
#define XM_SELECT_H
#include <stdio.h>

#include "xm_runtime.h"

/* "(1,3,8,8)", or "[(1,3,8,8) (1,10)]" for several inputs, appended at `at` (never past `cap`) */
static size_t xm_put_shapes(char* buf, size_t cap, size_t at, int n, const long* const* dims, const int* ndims) {
  if (n != 1 && at < cap) at += (size_t)snprintf(buf + at, cap - at, "[");
  for (int i = 0; i < n && at < cap; ++i) {
    at += (size_t)snprintf(buf + at, cap - at, i ? " (" : "(");
    for (int d = 0; d < ndims[i] && at < cap; ++d)
      at += (size_t)snprintf(buf + at, cap - at, d ? ",%ld" : "%ld", dims[i][d]);
    if (at < cap) at += (size_t)snprintf(buf + at, cap - at, ")");
  }
  if (n != 1 && at < cap) at += (size_t)snprintf(buf + at, cap - at, "]");
  return at;
}

/* the variant of `desc` whose inputs have exactly `shapes`, else -1 with `err` saying which shapes
   were given and which the library holds */
static int xm_select_variant(const xm_model_desc* desc, int num_inputs, const xm_shape* shapes, char* err,
                             size_t cap) {
  for (int k = 0; k < desc->num_variants; ++k) {
    const xm_variant* v = &desc->variants[k];
    int same = v->num_inputs == num_inputs;
    for (int i = 0; same && i < num_inputs; ++i) {
      same = shapes[i].ndim == v->inputs[i].ndim;
      for (int d = 0; same && d < shapes[i].ndim; ++d) same = shapes[i].dims[d] == v->inputs[i].shape[d];
    }
    if (same) return k;
  }
  enum { kMax = 64 };
  const long* dims[kMax];
  int ndims[kMax];
  int n = num_inputs < 0 ? 0 : num_inputs < kMax ? num_inputs : kMax;
  for (int i = 0; i < n; ++i) {
    dims[i] = shapes[i].dims;
    ndims[i] = shapes[i].ndim < 0 ? 0 : shapes[i].ndim < XM_MAX_DIMS ? shapes[i].ndim : XM_MAX_DIMS;
  }
  size_t at = (size_t)snprintf(err, cap, "no compiled variant for input shapes ");
  at = xm_put_shapes(err, cap, at, n, dims, ndims);
  if (at < cap) at += (size_t)snprintf(err + at, cap - at, "; this library holds ");
  for (int k = 0; k < desc->num_variants && at < cap; ++k) {
    const xm_variant* v = &desc->variants[k];
    int m = v->num_inputs < kMax ? v->num_inputs : kMax;
    for (int i = 0; i < m; ++i) {
      dims[i] = v->inputs[i].shape;
      ndims[i] = v->inputs[i].ndim;
    }
    if (k) at += (size_t)snprintf(err + at, cap - at, ", ");
    if (at < cap) at = xm_put_shapes(err, cap, at, m, dims, ndims);
  }
  return -1;
}
#endif

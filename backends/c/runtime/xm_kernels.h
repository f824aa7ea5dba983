/* xmge: helpers shared by generated kernels (included first by every generated model.c). */
#ifndef XM_KERNELS_H
#define XM_KERNELS_H
#include <math.h>
#include <string.h>
#include "xm_runtime.h"

/* float16 storage: ARM's float16_t (arm_neon.h) on AArch64; gcc's _Float16 elsewhere, so the
   portable templates that name float16_t also build for x86 */
#if !defined(__aarch64__)
typedef _Float16 float16_t;
#endif

static inline float xm_act_identity(float v) { return v; }
/* NaN stays NaN (MegEngine's RELU is x <= 0 ? 0 : x; the reference's max and min propagate NaN) */
static inline float xm_maxf(float a, float b) { return (a >= b || a != a) ? a : b; }
static inline float xm_minf(float a, float b) { return (a <= b || a != a) ? a : b; }
static inline float xm_act_relu(float v) { return v <= 0.f ? 0.f : v; }
static inline float xm_act_sigmoid(float v) { return 1.f / (1.f + expf(-v)); }
static inline float xm_act_hswish(float v) { return v * fminf(fmaxf(v + 3.f, 0.f), 6.f) / 6.f; }
static inline float xm_act_relu6(float v) { return xm_minf(xm_maxf(v, 0.f), 6.f); }
/* numpy's logaddexp: exact where the arguments are equal (inf stays inf), NaN in, NaN out */
static inline float xm_logaddexpf(float a, float b) {
  if (a == b) return a + 0.6931471805599453f;
  const float d = a - b;
  return d > 0.f ? a + log1pf(expf(-d)) : d <= 0.f ? b + log1pf(expf(d)) : d;
}

#ifdef XM_PROFILE_CLOCK
#include <time.h>
static inline double xm_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
#endif

#endif

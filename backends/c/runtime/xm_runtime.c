/* xmge runtime: one aligned copy of the weights and a pool of aligned arenas per model instance
 * (the contract: xm_runtime.h). */
#include "xm_runtime.h"
#include "xm_select.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct xm_slot {
  unsigned char* arena;
  struct xm_slot* next;
} xm_slot;

struct xm_model {
  unsigned char* weights;
  int threads;
  int max_arenas;
  unsigned long arena_size; /* the largest variant's: one arena serves any variant */
  pthread_mutex_t lock;
  pthread_cond_t freed;
  xm_slot* free_list;
  int arenas; /* allocated (free or in use) */
  int adapt;  /* choose between the instance's threads and one thread by measured latency */
  struct xm_pace* pace; /* per variant, under lock */
};

/* Two threads pay only while the second core is free. With another CPU-bound process there, libgomp's
   barriers waited for a descheduled thread (spinning), and two threads ran slower than one (issue 33:
   ShuffleNetV2 6.5 ms at 2 threads vs 3.7 at 1 next to a `nice -n 10` job). The runtime's own pool
   (xm_parallel.c) no longer waits for a worker that has not started a share, but a worker
   descheduled in the middle of one, or a machine whose every core is busy, still makes two threads
   lose. So an
   instance with more than one thread times its runs and keeps, per variant, its last XM_SAMPLES
   latencies with all its threads (arm 0) and with one (arm 1). After the first run (untimed: thread
   start, cold caches) it alternates until both arms have XM_SAMPLES, then runs the better one (arm
   1 only when its median is 5% below arm 0's: two threads stay unless one is clearly faster). Now
   and then it tries XM_SAMPLES fresh runs of the other arm, to notice the core freeing or filling
   up: XM_EXPLORE runs after a change of choice, twice as long after each try that lost, at most
   XM_EXPLORE_MAX (a try of two threads on a contended core can cost several runs' time). Medians,
   not means: one run preempted by another process must not flip the choice.
   XMGE_ADAPT_THREADS=0 turns this off (always all threads). */
#define XM_EXPLORE 32
#define XM_EXPLORE_MAX 512
#define XM_SAMPLES 3
_Static_assert(XM_SAMPLES == 3, "xm_median3 takes the median of three");
typedef struct xm_pace {
  double ms[2][XM_SAMPLES]; /* a ring of recent latencies per arm */
  unsigned long n[2];       /* samples recorded per arm */
  unsigned long runs;
  unsigned long tried; /* the run of the last try of the other arm */
  unsigned long interval; /* runs between tries */
  int best;
} xm_pace;

static double xm_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static double xm_median3(const double* v) {
  const double lo = v[0] < v[1] ? v[0] : v[1], hi = v[0] < v[1] ? v[1] : v[0];
  return v[2] < lo ? lo : v[2] > hi ? hi : v[2];
}

/* the arm of this run (-1: all threads, untimed) */
static int xm_pace_pick(xm_model* m, int variant) {
  pthread_mutex_lock(&m->lock);
  xm_pace* p = &m->pace[variant];
  const unsigned long run = p->runs++;
  int arm;
  if (run == 0) arm = -1;
  else if (p->n[0] < XM_SAMPLES || p->n[1] < XM_SAMPLES) arm = p->n[0] > p->n[1];
  else if (run - p->tried >= p->interval) {
    /* a try is XM_SAMPLES fresh runs of the other arm (its old ones may predate a change of load) */
    p->tried = run;
    arm = !p->best;
    p->n[arm] = 0;
  } else arm = p->best;
  pthread_mutex_unlock(&m->lock);
  return arm;
}

static void xm_pace_record(xm_model* m, int variant, int arm, double ms) {
  pthread_mutex_lock(&m->lock);
  xm_pace* p = &m->pace[variant];
  p->ms[arm][p->n[arm]++ % XM_SAMPLES] = ms;
  if (p->n[0] >= XM_SAMPLES && p->n[1] >= XM_SAMPLES) {
    const int best = xm_median3(p->ms[1]) < 0.95 * xm_median3(p->ms[0]);
    if (best != p->best) p->interval = XM_EXPLORE;
    else if (arm != best && p->n[arm] == XM_SAMPLES)
      p->interval = p->interval * 2 > XM_EXPLORE_MAX ? XM_EXPLORE_MAX : p->interval * 2;
    p->best = best;
  }
  pthread_mutex_unlock(&m->lock);
}

/* per calling thread, like errno: concurrent callers never see each other's messages */
static _Thread_local char xm_error[320];

const char* xm_last_error(void) { return xm_error; }

static void* xm_alloc(unsigned long n) {
  /* 64-byte alignment: the planner aligns every buffer to 64 and kernels use aligned vector loads */
  unsigned long size = (n + 63) / 64 * 64;
  return aligned_alloc(64, size ? size : 64);
}

static xm_slot* xm_new_slot(unsigned long size) {
  xm_slot* s = (xm_slot*)malloc(sizeof *s);
  if (!s) return NULL;
  s->arena = (unsigned char*)xm_alloc(size);
  s->next = NULL;
  if (!s->arena) {
    free(s);
    return NULL;
  }
  return s;
}

xm_model* xm_create(const void* weights, unsigned long weights_size, int threads, int max_arenas) {
  if (weights_size != xm_desc.weights_size) {
    snprintf(xm_error, sizeof xm_error, "weights blob has %lu bytes, the model expects %lu", weights_size,
             xm_desc.weights_size);
    return NULL;
  }
  xm_model* m = (xm_model*)calloc(1, sizeof *m);
  if (!m) {
    snprintf(xm_error, sizeof xm_error, "out of memory");
    return NULL;
  }
  for (int v = 0; v < xm_desc.num_variants; ++v)
    if (xm_desc.variants[v].arena_size > m->arena_size) m->arena_size = xm_desc.variants[v].arena_size;
  m->threads = threads;
  m->max_arenas = max_arenas > 0 ? max_arenas : XM_DEFAULT_MAX_ARENAS;
  const char* adapt = getenv("XMGE_ADAPT_THREADS");
  m->adapt = !(adapt && (!strcmp(adapt, "0") || !strcmp(adapt, "off") || !strcmp(adapt, "no")));
  m->pace = (xm_pace*)calloc(xm_desc.num_variants > 0 ? xm_desc.num_variants : 1, sizeof(xm_pace));
  for (int v = 0; m->pace && v < xm_desc.num_variants; ++v) m->pace[v].interval = XM_EXPLORE;
  pthread_mutex_init(&m->lock, NULL);
  pthread_cond_init(&m->freed, NULL);
  m->weights = (unsigned char*)xm_alloc(xm_desc.weights_size);
  /* one arena up front: a single caller never allocates in xm_run */
  m->free_list = xm_new_slot(m->arena_size);
  m->arenas = m->free_list ? 1 : 0;
  if (!m->weights || !m->free_list || !m->pace) {
    xm_destroy(m);
    snprintf(xm_error, sizeof xm_error, "out of memory");
    return NULL;
  }
  if (xm_desc.weights_size) memcpy(m->weights, weights, xm_desc.weights_size);
  return m;
}

static xm_slot* xm_acquire(xm_model* m) {
  pthread_mutex_lock(&m->lock);
  for (;;) {
    xm_slot* s = m->free_list;
    if (s) {
      m->free_list = s->next;
      pthread_mutex_unlock(&m->lock);
      return s;
    }
    if (m->arenas < m->max_arenas) break;
    pthread_cond_wait(&m->freed, &m->lock);
  }
  ++m->arenas; /* claimed before allocating, so the bound holds while the lock is released */
  pthread_mutex_unlock(&m->lock);
  xm_slot* s = xm_new_slot(m->arena_size);
  if (!s) {
    pthread_mutex_lock(&m->lock);
    --m->arenas;
    pthread_cond_signal(&m->freed);
    pthread_mutex_unlock(&m->lock);
  }
  return s;
}

static void xm_release(xm_model* m, xm_slot* s) {
  pthread_mutex_lock(&m->lock);
  s->next = m->free_list;
  m->free_list = s;
  pthread_cond_signal(&m->freed);
  pthread_mutex_unlock(&m->lock);
}

int xm_run_variant(xm_model* m, int variant, const void* const* inputs, void* const* outputs) {
  if (!m) {
    snprintf(xm_error, sizeof xm_error, "no model instance (create failed?)");
    return -1;
  }
  if (variant < 0 || variant >= xm_desc.num_variants) {
    snprintf(xm_error, sizeof xm_error, "variant %d does not exist: the library holds %d", variant,
             xm_desc.num_variants);
    return -1;
  }
  const xm_variant* v = &xm_desc.variants[variant];
  xm_slot* s = xm_acquire(m);
  if (!s) {
    snprintf(xm_error, sizeof xm_error, "out of memory for an arena of %lu bytes", m->arena_size);
    return -1;
  }
  xm_ctx ctx;
  ctx.failed = 0;
  ctx.error[0] = 0;
  const int threads = m->threads > 0 ? m->threads : v->default_threads;
  const int arm = threads > 1 && m->adapt ? xm_pace_pick(m, variant) : -1;
  const double t0 = arm >= 0 ? xm_now_ms() : 0;
  v->impl((void* const*)inputs, outputs, s->arena, m->weights + v->weights_offset, arm == 1 ? 1 : threads,
          &ctx);
  if (arm >= 0) xm_pace_record(m, variant, arm, xm_now_ms() - t0);
  xm_release(m, s);
  if (__atomic_load_n(&ctx.failed, __ATOMIC_ACQUIRE)) {
    snprintf(xm_error, sizeof xm_error, "%s", ctx.error);
    return 1;
  }
  return 0;
}

int xm_run(xm_model* m, const void* const* inputs, void* const* outputs) {
  return xm_run_variant(m, 0, inputs, outputs);
}

int xm_find_variant(int num_inputs, const xm_shape* shapes) {
  return xm_select_variant(&xm_desc, num_inputs, shapes, xm_error, sizeof xm_error);
}

int xm_run_shaped(xm_model* m, const xm_shape* shapes, const void* const* inputs, void* const* outputs) {
  const int n = xm_desc.num_variants ? xm_desc.variants[0].num_inputs : 0;
  const int v = xm_find_variant(n, shapes);
  return v < 0 ? -1 : xm_run_variant(m, v, inputs, outputs);
}

int xm_num_arenas(const xm_model* m) {
  if (!m) return 0;
  pthread_mutex_lock((pthread_mutex_t*)&m->lock);
  const int n = m->arenas;
  pthread_mutex_unlock((pthread_mutex_t*)&m->lock);
  return n;
}

void xm_destroy(xm_model* m) {
  if (!m) return;
  while (m->free_list) {
    xm_slot* s = m->free_list;
    m->free_list = s->next;
    free(s->arena);
    free(s);
  }
  pthread_mutex_destroy(&m->lock);
  pthread_cond_destroy(&m->freed);
  free(m->weights);
  free(m->pace);
  free(m);
}

static xm_api xm_the_api;

static void xm_api_init(void) {
  /* the variant table lives in model.c, another translation unit: not a constant initializer */
  const xm_api api = {
      XM_ABI_VERSION, XM_STR(XM_PREFIX), "c", xm_desc.weights_size, xm_desc.num_variants, xm_desc.variants,
      xm_create, xm_run, xm_run_variant, xm_find_variant, xm_run_shaped, xm_last_error, xm_destroy,
      xm_num_arenas,
  };
  xm_the_api = api;
}

const xm_api* xm_api_get(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, xm_api_init);
  return &xm_the_api;
}

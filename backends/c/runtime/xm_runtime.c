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
   lose. So an instance with more than one thread times its runs and keeps, per variant, recent
   latencies with all its threads (arm 0) and with one (arm 1), and runs the better one by their
   medians (arm 1 only when 5% below arm 0's: two threads stay unless one is clearly faster).

   Medians of up to XM_WINDOW runs of the arm in use. Next to a `nice -n 10` burner two threads are
   1.7x faster at the median, but some runs meet the burner's time slice and take longer than one
   thread would; the median of only 3 flips to one thread whenever 2 of 3 runs in a row are such
   runs, and then keeps it for 32 to 512 runs: with a third of the 2-thread runs slow, 90% of runs
   went to one thread (tests/test_threads_adapt.py's synthetic latencies; the likely cause of
   bench_x86 --contended choosing one thread for ResNet-18, 20.4 ms, against 11.7 with two fixed). A try of the other arm is XM_SAMPLES fresh runs (it costs latency
   when that arm is the slower one), compared with the window of the arm in use.

   Arms are measured in blocks, and a run of arm 0 right after a run of arm 1 is not counted:
   during a one-thread run the workers spin XMGE_SPIN_US and then sleep, and a CPU-bound process on
   the other core takes it; the next all-threads run starts with workers that must be woken and
   scheduled ahead of it, so its first parallel regions run short. That cost belongs to the switch,
   not to arm 0: a caller that keeps running arm 0 does not pay it (alternating the arms measured
   every arm-0 run cold). The first run is untimed (thread start, cold caches).

   Tries of the other arm notice the core freeing or filling up: XM_EXPLORE runs after a change of
   choice, twice as long after each try that lost, at most XM_EXPLORE_MAX (a try of two threads on
   a contended core can cost several runs' time). XMGE_ADAPT_THREADS=0 turns this off (always all
   threads). */
#define XM_EXPLORE 32
#define XM_EXPLORE_MAX 512
#define XM_SAMPLES 3 /* runs of a try (and of each arm at the start) */
#define XM_WINDOW 9  /* the latest runs of an arm its median is taken over */
typedef struct xm_pace {
  double ms[2][XM_WINDOW]; /* a ring of recent latencies per arm */
  unsigned long n[2];      /* samples recorded per arm since its latest try began */
  unsigned long runs;
  unsigned long tried; /* the run of the last try of the other arm */
  unsigned long interval; /* runs between tries */
  int best;
  int last; /* the arm of the latest run (-1: untimed, all threads) */
} xm_pace;

static double xm_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

/* the median of an arm's samples since its latest try began (at most XM_WINDOW, the newest) */
static double xm_arm_median(const xm_pace* p, int arm) {
  const int k = p->n[arm] < XM_WINDOW ? (int)p->n[arm] : XM_WINDOW;
  double v[XM_WINDOW];
  for (int i = 0; i < k; ++i) {
    const double x = p->ms[arm][(p->n[arm] - 1 - i) % XM_WINDOW];
    int j = i;
    for (; j > 0 && v[j - 1] > x; --j) v[j] = v[j - 1];
    v[j] = x;
  }
  return k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
}

/* the arm of this run (-1: all threads, untimed); *timed: whether its latency counts */
static int xm_pace_pick(xm_model* m, int variant, int* timed) {
  pthread_mutex_lock(&m->lock);
  xm_pace* p = &m->pace[variant];
  const unsigned long run = p->runs++;
  int arm;
  if (run == 0) arm = -1;
  else if (p->n[0] < XM_SAMPLES) arm = 0; /* a block of each arm, arm 0 first (its workers are up) */
  else if (p->n[1] < XM_SAMPLES) arm = 1;
  else if (run - p->tried >= p->interval) {
    /* fresh runs: the arm's old ones may predate a change of load */
    p->tried = run;
    arm = !p->best;
    p->n[arm] = 0;
  } else arm = p->best;
  *timed = arm == 1 || (arm == 0 && p->last != 1);
  p->last = arm;
  pthread_mutex_unlock(&m->lock);
  return arm;
}

static void xm_pace_record(xm_model* m, int variant, int arm, double ms) {
  pthread_mutex_lock(&m->lock);
  xm_pace* p = &m->pace[variant];
  p->ms[arm][p->n[arm]++ % XM_WINDOW] = ms;
  if (p->n[0] >= XM_SAMPLES && p->n[1] >= XM_SAMPLES) {
    const int best = xm_arm_median(p, 1) < 0.95 * xm_arm_median(p, 0);
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
  for (int v = 0; m->pace && v < xm_desc.num_variants; ++v) m->pace[v].interval = XM_EXPLORE, m->pace[v].last = -1;
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
  int timed = 0;
  const int arm = threads > 1 && m->adapt ? xm_pace_pick(m, variant, &timed) : -1;
  const double t0 = arm >= 0 ? xm_now_ms() : 0;
  v->impl((void* const*)inputs, outputs, s->arena, m->weights + v->weights_offset, arm == 1 ? 1 : threads,
          &ctx);
  if (timed) xm_pace_record(m, variant, arm, xm_now_ms() - t0);
#ifdef XM_PACE_TRACE
  /* a diagnostic build's log of the choice (bench/, by hand): arm ("c": not counted), ms, the choice */
  if (arm >= 0) fprintf(stderr, "pace %d%s %.3f best=%d\n", arm, timed ? "" : "c", xm_now_ms() - t0, m->pace[variant].best);
#endif
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

/* xmge's OpenMP runtime: the entry points gcc's -fopenmp code calls (GOMP_parallel, GOMP_barrier,
 * omp_get_thread_num, omp_get_num_threads: all the generated kernels use), served by a pool of this
 * library's own threads instead of libgomp's.
 *
 * Why not libgomp. Its team barriers wait for every thread of the team, spinning for milliseconds
 * (GOMP_SPINCOUNT) before sleeping. With another CPU-bound process on the second core, the worker
 * thread is often descheduled, and every parallel region of a run waits for it: ShuffleNetV2's 39
 * two-thread regions per run made 2 threads 1.8x slower than 1 next to a `nice -n 10` job (issue
 * 33). Here:
 *
 * - Late join. A region that calls no barrier (most kernels: `parallel for` with a static schedule)
 *   is a set of virtual threads 0..n-1, each computing the share gcc's static schedule gives its id.
 *   The caller runs id 0 at once and then claims any id no worker has claimed yet, so it never waits
 *   for a worker that has not started: it waits only for ids a worker is running. Which thread runs
 *   an id does not change what the id computes, so the outputs are the same bits.
 * - Gang regions. A region that calls GOMP_barrier needs its ids on distinct threads at once. The
 *   caller offers the ids, waits a little (XM_GANG_WAIT_*, halved after each offer in a row that
 *   went untaken: the other cores are busy) for workers to take them, then closes the
 *   offer and runs with the threads it got (omp_get_num_threads() says how many; every kernel's
 *   result is the same at any thread count: xm_runtime.h). A region is run as a gang until a run of
 *   it on two or more threads called no barrier (kernels' barriers are unconditional), then by late
 *   join.
 * - Waiting spins for a short time (XMGE_SPIN_US, default XM_SPIN_US_DEFAULT) and then sleeps on a
 *   futex, so an idle worker leaves its core to other processes between runs, and a woken one is
 *   scheduled ahead of a niced job. With more threads than usable CPUs (taskset, a cpuset) nothing
 *   spins: the waiter would hold up the thread it waits for.
 * - A worker that finds itself on its caller's CPU takes that CPU out of its own affinity
 *   (xm_avoid_caller_cpu): next to a CPU-bound process the scheduler otherwise stacks the two on
 *   one core.
 * - One region at a time per library: a region opened while another is in flight (a nested one, or
 *   one of another caller thread of the same library) runs on its caller alone, as libgomp does for
 *   nested regions.
 *
 * The symbols are hidden: each model library binds its kernels to its own pool, whatever else the
 * process loads (PyTorch's libgomp, another model); and weak: a program linking several models'
 * objects statically gets one pool. Linking model.o and xm_runtime.o without this file (and with
 * -fopenmp) still works, on libgomp. Workers start at the first region that needs
 * them and stop when the library is unloaded (a destructor joins them, so dlclose never unmaps code
 * a worker runs); a forked child starts with none.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

/* hidden: bound inside each library; weak: several models' runtimes linked into one program share
   the first one's pool instead of clashing */
#define XM_HIDDEN __attribute__((visibility("hidden"), weak))
/* long enough to bridge the gap between two inferences of a caller in a loop: a worker that slept
   there wakes late next to another process and the first gang runs short (bench_x86 --contended:
   ShuffleNetV2 at 2 threads 1.31x -> 1.46x quiet, 3.95 -> 2.45 ms next to a nice -n 10 burner) */
#define XM_SPIN_US_DEFAULT 3000
/* how long a gang's offer stays open: a spinning worker takes an id within a microsecond unless it
   is descheduled; one asleep on the futex needs a wake-up (tens of microseconds in a VM) */
#define XM_GANG_WAIT_AWAKE_US 10
#define XM_GANG_WAIT_ASLEEP_US 60
#define XM_GANG_WAIT_NEW_US 500 /* a worker started for this region (thread creation) */
#define XM_MAX_WORKERS 255
#define XM_REGION_TABLE 1024 /* region functions remembered (a power of two) */

#define LOAD(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
#define ADD(p, v) __atomic_add_fetch((p), (v), __ATOMIC_SEQ_CST)
#define CAS(p, e, v) __atomic_compare_exchange_n((p), (e), (v), 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)

XM_HIDDEN void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags);
XM_HIDDEN void GOMP_barrier(void);
XM_HIDDEN int omp_get_thread_num(void);
XM_HIDDEN int omp_get_num_threads(void);

/* what the region functions see: their virtual id and team size; `virt`: ids may run one after
   another on this thread (a barrier there would never complete) */
static _Thread_local int xm_tid, xm_nthr = 1, xm_in_region, xm_virt, xm_saw_barrier;

typedef struct {
  /* the job in flight: written by its caller before `claim` is reset and `gen` bumped */
  void (*fn)(void*);
  void* data;
  int gang;
  int final_team; /* gang: the team size the claimed ids run with, set before `go` */
  int go;         /* gang: the job's number once its team is final */
  int job;        /* the job's number */
  uint64_t claim; /* (offered ids << 32) | next id to take */
  int done;       /* ids finished by workers */
  int saw_barrier;
  /* gang barrier */
  int bar_count, bar_gen;
  /* sleepers per futex word: a waker makes the syscall only when someone sleeps */
  int gen, gen_sleepers, go_sleepers, done_sleepers, bar_sleepers;
  int busy;        /* a region is in flight */
  int gang_misses; /* gang offers in a row not fully taken (at most 8); the region's caller's */
  int quit;
  int workers;
  pthread_t threads[XM_MAX_WORKERS];
  pthread_mutex_t grow;
  long spin_ns; /* read and written atomically (relaxed): set once, zeroed when threads outnumber CPUs */
  int cpus;
  int caller_cpu; /* the CPU the caller of the job in flight runs on (-1: unknown) */
#ifdef __linux__
  cpu_set_t allowed; /* the process's CPUs when the pool started */
#endif
} xm_pool;

static xm_pool P = {.grow = PTHREAD_MUTEX_INITIALIZER, .caller_cpu = -1};

static double xm_clock_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

#ifdef XM_PARALLEL_STATS
/* a diagnostic build's counters (bench/, tests): regions by how they ran, ids the caller took over,
   gang offers closed short, barriers; read (and zeroed) with xm_parallel_stats */
/* the last three: nanoseconds the caller waited for a gang's ids to be taken, for workers' shares
   at a region's end, and any thread waited at barriers */
enum {
  XM_ST_SERIAL, XM_ST_LATE, XM_ST_GANG, XM_ST_TAKEN, XM_ST_SHORT, XM_ST_BARRIER,
  XM_ST_OFFER_NS, XM_ST_JOIN_NS, XM_ST_BARRIER_NS, XM_ST_N
};
static long xm_stats[XM_ST_N];
#define XM_COUNT(k) __atomic_add_fetch(&xm_stats[k], 1, __ATOMIC_RELAXED)
#define XM_TIME_START() const double xm_t0 = xm_clock_ns()
#define XM_TIME_ADD(k) __atomic_add_fetch(&xm_stats[k], (long)(xm_clock_ns() - xm_t0), __ATOMIC_RELAXED)
int xm_parallel_stats(long* out, int n);
int xm_parallel_stats(long* out, int n) {
  for (int i = 0; i < n && i < XM_ST_N; ++i) out[i] = __atomic_exchange_n(&xm_stats[i], 0, __ATOMIC_RELAXED);
  return XM_ST_N;
}
#else
#define XM_COUNT(k) ((void)0)
#define XM_TIME_START() ((void)0)
#define XM_TIME_ADD(k) ((void)0)
#endif

/* region functions: 1 when a run called no barrier (late join from then on), 2 when one did */
static struct {
  void (*fn)(void*);
  int kind;
} xm_regions[XM_REGION_TABLE];

static int xm_region_kind(void (*fn)(void*)) {
  const uintptr_t h = ((uintptr_t)fn >> 4) * 0x9E3779B97F4A7C15ull;
  for (unsigned i = 0; i < XM_REGION_TABLE; ++i) {
    const unsigned at = (unsigned)(h + i) & (XM_REGION_TABLE - 1);
    void (*seen)(void*) = __atomic_load_n(&xm_regions[at].fn, __ATOMIC_ACQUIRE);
    if (seen == fn) return __atomic_load_n(&xm_regions[at].kind, __ATOMIC_ACQUIRE);
    if (!seen) return 0;
  }
  return 0;
}

static void xm_region_learn(void (*fn)(void*), int barrier) {
  const uintptr_t h = ((uintptr_t)fn >> 4) * 0x9E3779B97F4A7C15ull;
  for (unsigned i = 0; i < XM_REGION_TABLE; ++i) {
    const unsigned at = (unsigned)(h + i) & (XM_REGION_TABLE - 1);
    void (*seen)(void*) = NULL;
    if (CAS(&xm_regions[at].fn, &seen, fn) || seen == fn) {
      /* a barrier seen once is remembered: the kind only goes from 1 to 2 */
      int kind = 0;
      if (!CAS(&xm_regions[at].kind, &kind, barrier ? 2 : 1) && barrier) STORE(&xm_regions[at].kind, 2);
      return;
    }
  }
  /* table full: unknown regions run as gangs, which is always correct */
}

static inline void xm_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

static void xm_futex_wait(int* word, int old) {
#ifdef __linux__
  syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, old, NULL, NULL, 0);
#else
  (void)word, (void)old;
  sched_yield();
#endif
}

static void xm_futex_wake(int* word) {
#ifdef __linux__
  syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
  (void)word;
#endif
}

/* until *word != old: spin for P.spin_ns (the next job or the end of a share usually comes within
   it), then sleep; the new value */
static int xm_wait_change(int* word, int old, int* sleepers) {
  const long spin_ns = __atomic_load_n(&P.spin_ns, __ATOMIC_RELAXED);
  int v = LOAD(word);
  if (v != old) return v;
  const double until = xm_clock_ns() + (double)spin_ns;
  for (unsigned i = 1; spin_ns > 0; ++i) {
    xm_pause();
    v = __atomic_load_n(word, __ATOMIC_ACQUIRE);
    if (v != old) return v;
    if (!(i & 255) && xm_clock_ns() > until) break;
  }
  for (;;) {
    ADD(sleepers, 1);
    v = LOAD(word); /* after announcing the sleep: a waker either sees the sleeper or we see its store */
    if (v == old) xm_futex_wait(word, old);
    ADD(sleepers, -1);
    v = LOAD(word);
    if (v != old) return v;
  }
}

static void xm_wake(int* word, int* sleepers) {
  if (LOAD(sleepers)) xm_futex_wake(word);
}

static void xm_run_id(void (*fn)(void*), void* data, int id, int team, int virt) {
  xm_tid = id;
  xm_nthr = team;
  xm_virt = virt;
  xm_in_region = 1;
  fn(data);
  xm_in_region = 0;
  xm_virt = 0;
  xm_tid = 0;
  xm_nthr = 1;
}

/* the next offered id, or -1 when all are taken */
static int xm_claim(void) {
  uint64_t s = LOAD(&P.claim);
  for (;;) {
    const uint32_t offered = (uint32_t)(s >> 32), next = (uint32_t)s;
    if (next >= offered) return -1;
    if (CAS(&P.claim, &s, s + 1)) return (int)next;
  }
}

static void xm_worker_take(void) {
  for (;;) {
    const int id = xm_claim();
    if (id < 0) return;
    /* a claimed id holds the job open (its caller waits for it), so the fields below are its own */
    void (*fn)(void*) = P.fn;
    void* data = P.data;
    const int gang = P.gang; /* read while the job is held open: once `done` counts it, a new job may start */
    if (gang) {
      const int job = P.job;
      int go = LOAD(&P.go);
      while (go != job) go = xm_wait_change(&P.go, go, &P.go_sleepers);
      xm_run_id(fn, data, id, P.final_team, 0);
    } else {
      xm_run_id(fn, data, id, (int)(LOAD(&P.claim) >> 32), 1);
    }
    ADD(&P.done, 1);
    xm_wake(&P.done, &P.done_sleepers);
    if (gang) return; /* a gang's ids need distinct threads */
  }
}

/* A worker on its caller's CPU moves off it. With a CPU-bound process on the other core (a `nice
   -n 10` job), that core is never idle, so the scheduler wakes a sleeping worker on the CPU of the
   thread that woke it, the caller: the two then share one core for many runs (and a spinning
   waiter takes the core from the thread it waits for) while the niced job keeps the other.
   bench_x86 --contended, ResNet-50 at 2 threads next to the job: runs of 100-170 ms against 62 on
   one thread, before this. Leaving the caller's CPU out of the worker's affinity puts it next to
   the niced job, which it preempts. Only the pool's own threads are moved, never the caller. */
static void xm_avoid_caller_cpu(void) {
#ifdef __linux__
  const int caller = LOAD(&P.caller_cpu);
  if (caller < 0 || P.cpus < 2 || sched_getcpu() != caller) return;
  cpu_set_t set = P.allowed;
  CPU_CLR(caller, &set);
  if (CPU_COUNT(&set) > 0) sched_setaffinity(0, sizeof set, &set);
#endif
}

static void* xm_worker(void* arg) {
  int seen = (int)(intptr_t)arg;
  for (;;) {
    seen = xm_wait_change(&P.gen, seen, &P.gen_sleepers);
    if (LOAD(&P.quit)) return NULL;
    xm_avoid_caller_cpu();
    xm_worker_take();
  }
}

static void xm_atfork_child(void) {
  /* the child has none of the parent's workers */
  P.workers = 0;
  P.busy = 0;
  P.gen_sleepers = P.go_sleepers = P.done_sleepers = P.bar_sleepers = 0;
  pthread_mutex_init(&P.grow, NULL);
}

/* the CPUs this thread may run on (its affinity mask, e.g. taskset or a container's cpuset) */
static int xm_usable_cpus(void) {
#ifdef __linux__
  if (!sched_getaffinity(0, sizeof P.allowed, &P.allowed)) return CPU_COUNT(&P.allowed);
#endif
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static void xm_init_once(void) {
  const char* s = getenv("XMGE_SPIN_US");
  const double us = s && *s ? atof(s) : XM_SPIN_US_DEFAULT;
  __atomic_store_n(&P.spin_ns, (long)((us < 0 ? 0 : us) * 1e3), __ATOMIC_RELAXED);
  P.cpus = xm_usable_cpus();
  pthread_atfork(NULL, NULL, xm_atfork_child);
}

/* at least n workers (fewer where threads cannot be made); how many there are */
static int xm_grow(int n) {
  if (n > XM_MAX_WORKERS) n = XM_MAX_WORKERS;
  if (LOAD(&P.workers) >= n) return n;
  pthread_mutex_lock(&P.grow);
  while (P.workers < n) {
    const int gen = LOAD(&P.gen);
    if (pthread_create(&P.threads[P.workers], NULL, xm_worker, (void*)(intptr_t)gen)) break;
    STORE(&P.workers, P.workers + 1);
  }
  const int got = P.workers;
  pthread_mutex_unlock(&P.grow);
  return got;
}

__attribute__((destructor)) static void xm_pool_stop(void) {
  pthread_mutex_lock(&P.grow);
  if (P.workers) {
    STORE(&P.quit, 1);
    ADD(&P.gen, 1);
    xm_futex_wake(&P.gen);
    for (int i = 0; i < P.workers; ++i) pthread_join(P.threads[i], NULL);
    P.workers = 0;
    STORE(&P.quit, 0);
  }
  pthread_mutex_unlock(&P.grow);
}

static void xm_serial(void (*fn)(void*), void* data) {
  const int tid = xm_tid, nthr = xm_nthr, in = xm_in_region, virt = xm_virt, saw = xm_saw_barrier;
  xm_saw_barrier = 0;
  XM_COUNT(XM_ST_SERIAL);
  xm_run_id(fn, data, 0, 1, 0);
  /* a run on one thread shows a barrier but cannot vouch for none: only a team's run can */
  if (!in && xm_saw_barrier) xm_region_learn(fn, 1);
  xm_tid = tid, xm_nthr = nthr, xm_in_region = in, xm_virt = virt, xm_saw_barrier = saw;
}

void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags) {
  (void)flags; /* proc_bind: the pool's threads are not bound, only kept off the caller's CPU */
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, xm_init_once);
  if (num_threads == 0) {
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    num_threads = cpus > 0 ? (unsigned)cpus : 1;
  }
  int idle = 0;
  if (num_threads < 2 || xm_in_region || !CAS(&P.busy, &idle, 1)) {
    xm_serial(fn, data);
    return;
  }
  const int before = LOAD(&P.workers);
  const int workers = xm_grow((int)num_threads - 1);
  const int team = workers + 1 < (int)num_threads ? workers + 1 : (int)num_threads;
  if (team < 2) {
    STORE(&P.busy, 0);
    xm_serial(fn, data);
    return;
  }
  /* threads share a CPU: a spinning one would hold up the one it waits for */
  if (team > P.cpus) __atomic_store_n(&P.spin_ns, 0, __ATOMIC_RELAXED);
  const int gang = xm_region_kind(fn) != 1;
#ifdef __linux__
  STORE(&P.caller_cpu, sched_getcpu());
#endif
  P.fn = fn;
  P.data = data;
  P.gang = gang;
  P.job += 1;
  STORE(&P.done, 0);
  STORE(&P.saw_barrier, 0);
  STORE(&P.bar_count, 0);
  STORE(&P.claim, ((uint64_t)team << 32) | 1u); /* id 0 is the caller's */
  ADD(&P.gen, 1);
  const int asleep = LOAD(&P.gen_sleepers);
  if (asleep) xm_futex_wake(&P.gen);
  int by_workers;
  if (gang) {
    XM_TIME_START();
    const int wait_us = workers > before ? XM_GANG_WAIT_NEW_US
                        : asleep          ? XM_GANG_WAIT_ASLEEP_US
                                          : XM_GANG_WAIT_AWAKE_US;
    /* offers that went untaken (the other cores busy with other processes) halve the next wait */
    const double until = xm_clock_ns() + wait_us * 1e3 / (1 << P.gang_misses);
    uint64_t s = LOAD(&P.claim);
    for (unsigned i = 1; (uint32_t)s < (uint32_t)team; ++i) {
      xm_pause();
      if (!(i & 63) && xm_clock_ns() > until) {
        /* close the offer at the ids taken so far */
        const uint64_t closed = ((s & 0xffffffffu) << 32) | (s & 0xffffffffu);
        if (CAS(&P.claim, &s, closed)) break;
        continue;
      }
      s = LOAD(&P.claim);
    }
    const int got = (int)(uint32_t)LOAD(&P.claim);
    P.gang_misses = got < team ? (P.gang_misses < 8 ? P.gang_misses + 1 : 8) : 0;
    XM_TIME_ADD(XM_ST_OFFER_NS);
    XM_COUNT(XM_ST_GANG);
    if (got < team) XM_COUNT(XM_ST_SHORT);
    P.final_team = got;
    STORE(&P.go, P.job);
    xm_wake(&P.go, &P.go_sleepers);
    xm_saw_barrier = 0;
    xm_run_id(fn, data, 0, got, 0);
    by_workers = got - 1;
  } else {
    xm_run_id(fn, data, 0, team, 1);
    int mine = 1;
    for (int id; (id = xm_claim()) >= 0; ++mine) xm_run_id(fn, data, id, team, 1);
    by_workers = team - mine;
    XM_COUNT(XM_ST_LATE);
    for (int k = 1; k < mine; ++k) XM_COUNT(XM_ST_TAKEN);
  }
  {
    XM_TIME_START();
    for (int d = LOAD(&P.done); d < by_workers;) d = xm_wait_change(&P.done, d, &P.done_sleepers);
    XM_TIME_ADD(XM_ST_JOIN_NS);
  }
  if (gang) {
    const int saw = LOAD(&P.saw_barrier) || xm_saw_barrier;
    if (saw || by_workers > 0) xm_region_learn(fn, saw);
  }
  STORE(&P.busy, 0);
}

void GOMP_barrier(void) {
  xm_saw_barrier = 1;
  if (xm_nthr < 2) return;
  if (xm_virt) {
    /* only regions seen without a barrier run by late join: kernels' barriers are unconditional */
    fprintf(stderr, "xmge runtime: a barrier in a parallel region that ran without one before\n");
    abort();
  }
  STORE(&P.saw_barrier, 1);
  XM_COUNT(XM_ST_BARRIER);
  const int gen = LOAD(&P.bar_gen);
  if (ADD(&P.bar_count, 1) == xm_nthr) {
    STORE(&P.bar_count, 0);
    ADD(&P.bar_gen, 1);
    xm_wake(&P.bar_gen, &P.bar_sleepers);
  } else {
    XM_TIME_START();
    for (int g = gen; g == gen;) g = xm_wait_change(&P.bar_gen, g, &P.bar_sleepers);
    XM_TIME_ADD(XM_ST_BARRIER_NS);
  }
}

int omp_get_thread_num(void) { return xm_tid; }

int omp_get_num_threads(void) { return xm_nthr; }

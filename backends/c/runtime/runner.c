/* xmge standalone runner.
 *
 *   runner WEIGHTS.bin [-t THREADS] [-n ITERS] [-w WARMUP] [-v VARIANT] [-i IN0.bin ...] [-o OUT0.bin ...]
 *   runner --describe [VARIANT]
 *
 * Built with the model's prefix (-DXM_PREFIX=P) it runs that model through P_api(); VARIANT (default 0)
 * picks one of the library's shape variants.
 * Inputs are raw little-endian tensors in model order, each in its own dtype (the variant's inputs table:
 * int8 bytes for qint8, int32 for qint32, one byte per bool, ...); inputs not given are random
 * (floats in [-1, 1), integers of the type's small range). Outputs are written raw in their dtypes.
 * Prints the model's I/O, arena size and the median / min latency over ITERS runs.
 * --describe prints one line per tensor, "input|output NAME DTYPE NBYTES DIM0 DIM1 ...", and exits.
 */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xm_runtime.h"

static void* read_file(const char* path, unsigned long* size) {
  FILE* f = fopen(path, "rb");
  if (!f) { fprintf(stderr, "runner: cannot open %s\n", path); exit(2); }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void* buf = malloc(n > 0 ? (size_t)n : 1);
  if (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) { fprintf(stderr, "runner: short read %s\n", path); exit(2); }
  fclose(f);
  *size = (unsigned long)n;
  return buf;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

#define XM_MAX_IO 1024 /* inputs / outputs a model may have */

static unsigned long elements(const xm_tensor_info* t) {
  unsigned long n = 1;
  for (int d = 0; d < t->ndim; ++d) n *= (unsigned long)t->shape[d];
  return n;
}

/* a random tensor of t's dtype (the names of dialects/dtypes.py) */
static void* random_input(const xm_tensor_info* t) {
  unsigned char* buf = (unsigned char*)calloc(t->nbytes ? t->nbytes : 1, 1);
  const unsigned long n = elements(t), size = n ? t->nbytes / n : 0;
  const char* d = t->dtype;
  for (unsigned long k = 0; k < n; ++k) {
    const int r = rand();
    if (!strcmp(d, "float32") && size == 4) {
      ((float*)buf)[k] = 2.f * r / (float)RAND_MAX - 1.f;
    } else if (!strcmp(d, "float16") && size == 2) {
      /* sign and a value in [0.5, 1): exponent -1, random mantissa */
      ((unsigned short*)buf)[k] = (unsigned short)(((r >> 10) & 1) << 15 | 0x3800 | (r & 0x3ff));
    } else if (!strcmp(d, "bool") && size == 1) {
      buf[k] = (unsigned char)(r & 1);
    } else if ((!strcmp(d, "uint8") || !strcmp(d, "quint8")) && size == 1) {
      buf[k] = (unsigned char)(r & 0xff);
    } else if (size == 1) {
      ((signed char*)buf)[k] = (signed char)(r % 256 - 128);
    } else if (size == 2) {
      ((short*)buf)[k] = (short)(r % 256 - 128);
    } else if (size == 4) {
      ((int*)buf)[k] = r % 256 - 128;
    }
  }
  return buf;
}

static void describe(const char* kind, const xm_tensor_info* t) {
  printf("%s %s %s %lu", kind, t->name, t->dtype, t->nbytes);
  for (int d = 0; d < t->ndim; ++d) printf(" %ld", t->shape[d]);
  printf("\n");
}

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s WEIGHTS.bin [-t THREADS] [-n ITERS] [-w WARMUP] [-v VARIANT] [-i IN.bin ...] [-o OUT.bin ...]\n", argv[0]);
    return 2;
  }
  const xm_api* api = xm_api_get();
  if (!strcmp(argv[1], "--describe")) {
    const int k = argc > 2 ? atoi(argv[2]) : 0;
    if (k < 0 || k >= api->num_variants) { fprintf(stderr, "runner: no variant %d\n", k); return 2; }
    const xm_variant* v = &api->variants[k];
    for (int i = 0; i < v->num_inputs; ++i) describe("input", &v->inputs[i]);
    for (int i = 0; i < v->num_outputs; ++i) describe("output", &v->outputs[i]);
    return 0;
  }
  int threads = 0, iters = 10, warmup = 2, nin = 0, nout = 0, variant = 0;
  const char* in_paths[XM_MAX_IO];
  const char* out_paths[XM_MAX_IO];
  for (int a = 2; a < argc; ++a) {
    if (!strcmp(argv[a], "-t") && a + 1 < argc) threads = atoi(argv[++a]);
    else if (!strcmp(argv[a], "-n") && a + 1 < argc) iters = atoi(argv[++a]);
    else if (!strcmp(argv[a], "-w") && a + 1 < argc) warmup = atoi(argv[++a]);
    else if (!strcmp(argv[a], "-v") && a + 1 < argc) variant = atoi(argv[++a]);
    else if (!strcmp(argv[a], "-i") && a + 1 < argc && nin < XM_MAX_IO) in_paths[nin++] = argv[++a];
    else if (!strcmp(argv[a], "-o") && a + 1 < argc && nout < XM_MAX_IO) out_paths[nout++] = argv[++a];
    else { fprintf(stderr, "runner: unknown argument %s\n", argv[a]); return 2; }
  }
  if (iters < 1) iters = 1;
  if (warmup < 0) warmup = 0;
  if (variant < 0 || variant >= api->num_variants) { fprintf(stderr, "runner: no variant %d\n", variant); return 2; }
  const xm_variant* v = &api->variants[variant];
  unsigned long wsize = 0;
  void* weights = read_file(argv[1], &wsize);
  xm_model* m = xm_create(weights, wsize, threads, 0);
  if (!m) { fprintf(stderr, "runner: %s\n", xm_last_error()); return 1; }
  void* ins[XM_MAX_IO];
  void* outs[XM_MAX_IO];
  srand(1);
  if (v->num_inputs > XM_MAX_IO || v->num_outputs > XM_MAX_IO) { fprintf(stderr, "runner: too many inputs or outputs\n"); return 2; }
  for (int i = 0; i < v->num_inputs; ++i) {
    const xm_tensor_info* t = &v->inputs[i];
    if (i < nin) {
      unsigned long n = 0;
      ins[i] = read_file(in_paths[i], &n);
      if (n != t->nbytes) { fprintf(stderr, "runner: %s has %lu bytes, input %s needs %lu\n", in_paths[i], n, t->name, t->nbytes); return 2; }
    } else {
      ins[i] = random_input(t);
    }
    printf("input %s %s [", t->name, t->dtype);
    for (int d = 0; d < t->ndim; ++d) printf(d ? ", %ld" : "%ld", t->shape[d]);
    printf("]\n");
  }
  for (int i = 0; i < v->num_outputs; ++i) outs[i] = malloc(v->outputs[i].nbytes ? v->outputs[i].nbytes : 1);
  double* times = (double*)malloc(sizeof(double) * (size_t)iters);
  int status = 0;
  for (int r = 0; r < warmup + iters && !status; ++r) {
    double t0 = now_ms();
    if (xm_run_variant(m, variant, (const void* const*)ins, outs)) {
      /* the exit status and prefix the Python side (backends/c/backend.py: run_runner) recognises;
         everything is still freed below (the sanitizer builds check for leaks) */
      fprintf(stderr, "runner: run failed: %s\n", xm_last_error());
      status = 3;
    } else if (r >= warmup) {
      times[r - warmup] = now_ms() - t0;
    }
  }
  if (!status) {
    qsort(times, (size_t)iters, sizeof(double), cmp);
    printf("arena %lu bytes, weights %lu bytes\n", v->arena_size, api->weights_size);
    printf("median %.3f ms, min %.3f ms over %d runs\n", times[iters / 2], times[0], iters);
  }
  for (int i = 0; i < v->num_outputs && i < nout && !status; ++i) {
    FILE* f = fopen(out_paths[i], "wb");
    if (!f || fwrite(outs[i], 1, v->outputs[i].nbytes, f) != v->outputs[i].nbytes) {
      fprintf(stderr, "runner: cannot write %s\n", out_paths[i]);
      return 1;
    }
    fclose(f);
  }
  for (int i = 0; i < v->num_inputs; ++i) free(ins[i]);
  for (int i = 0; i < v->num_outputs; ++i) free(outs[i]);
  free(times);
  free(weights);
  xm_destroy(m);
  return status;
}

/* xmge standalone runner.
 *
 *   runner WEIGHTS.bin [-t THREADS] [-n ITERS] [-w WARMUP] [-i IN0.bin ...] [-o OUT0.bin ...]
 *
 * Inputs are raw little-endian tensors in model order (random in [-1, 1) when not given); outputs are
 * written raw. Prints the model's I/O, arena size and the median / min latency over ITERS runs.
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

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s WEIGHTS.bin [-t THREADS] [-n ITERS] [-w WARMUP] [-i IN.bin ...] [-o OUT.bin ...]\n", argv[0]);
    return 2;
  }
  int threads = 0, iters = 10, warmup = 2, nin = 0, nout = 0;
  const char* in_paths[XM_MAX_IO];
  const char* out_paths[XM_MAX_IO];
  for (int a = 2; a < argc; ++a) {
    if (!strcmp(argv[a], "-t") && a + 1 < argc) threads = atoi(argv[++a]);
    else if (!strcmp(argv[a], "-n") && a + 1 < argc) iters = atoi(argv[++a]);
    else if (!strcmp(argv[a], "-w") && a + 1 < argc) warmup = atoi(argv[++a]);
    else if (!strcmp(argv[a], "-i") && a + 1 < argc && nin < XM_MAX_IO) in_paths[nin++] = argv[++a];
    else if (!strcmp(argv[a], "-o") && a + 1 < argc && nout < XM_MAX_IO) out_paths[nout++] = argv[++a];
    else { fprintf(stderr, "runner: unknown argument %s\n", argv[a]); return 2; }
  }
  if (iters < 1) iters = 1;
  unsigned long wsize = 0;
  void* weights = read_file(argv[1], &wsize);
  xm_model* m = xm_create(weights, wsize, threads);
  if (!m) { fprintf(stderr, "runner: %s\n", xm_last_error()); return 1; }
  void* ins[XM_MAX_IO];
  void* outs[XM_MAX_IO];
  srand(1);
  for (int i = 0; i < xm_get_num_inputs(); ++i) {
    const xm_tensor_info* t = xm_get_input(i);
    if (i < nin) {
      unsigned long n = 0;
      ins[i] = read_file(in_paths[i], &n);
      if (n != t->nbytes) { fprintf(stderr, "runner: %s has %lu bytes, input %s needs %lu\n", in_paths[i], n, t->name, t->nbytes); return 2; }
    } else {
      float* buf = (float*)malloc(t->nbytes);
      for (unsigned long k = 0; k < t->nbytes / 4; ++k) buf[k] = 2.f * rand() / (float)RAND_MAX - 1.f;
      ins[i] = buf;
    }
    printf("input %s %s [", t->name, t->dtype);
    for (int d = 0; d < t->ndim; ++d) printf(d ? ", %ld" : "%ld", t->shape[d]);
    printf("]\n");
  }
  for (int i = 0; i < xm_get_num_outputs(); ++i) outs[i] = malloc(xm_get_output(i)->nbytes);
  double* times = (double*)malloc(sizeof(double) * (size_t)iters);
  for (int r = 0; r < warmup; ++r) xm_run(m, (const void* const*)ins, outs);
  for (int r = 0; r < iters; ++r) {
    double t0 = now_ms();
    xm_run(m, (const void* const*)ins, outs);
    times[r] = now_ms() - t0;
  }
  qsort(times, (size_t)iters, sizeof(double), cmp);
  printf("arena %lu bytes, weights %lu bytes\n", xm_get_arena_size(), xm_get_weights_size());
  printf("median %.3f ms, min %.3f ms over %d runs\n", times[iters / 2], times[0], iters);
  for (int i = 0; i < xm_get_num_outputs() && i < nout; ++i) {
    FILE* f = fopen(out_paths[i], "wb");
    if (!f || fwrite(outs[i], 1, xm_get_output(i)->nbytes, f) != xm_get_output(i)->nbytes) {
      fprintf(stderr, "runner: cannot write %s\n", out_paths[i]);
      return 1;
    }
    fclose(f);
  }
  for (int i = 0; i < xm_get_num_inputs(); ++i) free(ins[i]);
  for (int i = 0; i < xm_get_num_outputs(); ++i) free(outs[i]);
  free(times);
  free(weights);
  xm_destroy(m);
  return 0;
}

/* A C program on the ncclz C API (docs/C_API.md): every rank all-reduces a
 * smooth field with a lossy bound, checks every element against the exact sum,
 * splits off the even ranks, and reports the compression.
 *
 * Built against an installed ncclz with CMake (examples/c/CMakeLists.txt), run
 * one process per rank, e.g.:  ncclz-run -n 3 ./allreduce
 * (RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT from the environment). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "ncclz/ncclz.h"

#define CHECK(call)                                                                                    \
  do {                                                                                                 \
    ncclzResult_t r_ = (call);                                                                         \
    if (r_ != ncclzSuccess) {                                                                          \
      fprintf(stderr, "%s failed: %s: %s\n", #call, ncclzGetErrorString(r_), ncclzGetLastError(NULL)); \
      exit(1);                                                                                         \
    }                                                                                                  \
  } while (0)

static float value(size_t i, int rank) { return (float)(sin(0.001 * (double)i) * (rank + 1) + 0.01 * rank); }

int main(void) {
  int version = 0, rank = 0, nranks = 0;
  ncclzComm_t comm;
  CHECK(ncclzGetVersion(&version));
  CHECK(ncclzCommInitFromEnv(&comm));
  CHECK(ncclzCommUserRank(comm, &rank));
  CHECK(ncclzCommCount(comm, &nranks));

  const size_t n = (size_t)1 << 20;
  float* x = malloc(n * sizeof *x);
  float* y = malloc(n * sizeof *y);
  if (!x || !y) return 1;
  for (size_t i = 0; i < n; ++i) x[i] = value(i, rank);
  const double E = 1e-3;
  CHECK(ncclzAllReduce(x, y, n, ncclzFloat32, ncclzSum, ncclzCompressionLossyAbs(E), comm));
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    double exact = 0;
    for (int k = 0; k < nranks; ++k) exact += (double)value(i, k);
    const double err = fabs((double)y[i] - exact);
    if (err > worst) worst = err;
  }
  ncclzCallStats_t st;
  CHECK(ncclzCommGetLastStats(comm, &st));

  /* the even ranks in a communicator of their own, the odd ones in none */
  ncclzComm_t evens = NULL;
  CHECK(ncclzCommSplit(comm, rank % 2 == 0 ? 0 : NCCLZ_SPLIT_NOCOLOR, rank, &evens));
  int evens_size = 0;
  if (evens) CHECK(ncclzCommCount(evens, &evens_size));

  printf("rank %d of %d (ncclz %d): max error %.3g <= %g, ratio %.2f, evens %d\n", rank, nranks, version, worst, E,
         st.ratio, evens_size);
  if (evens) CHECK(ncclzCommDestroy(evens));
  CHECK(ncclzCommDestroy(comm));
  free(x);
  free(y);
  return worst <= E ? 0 : 2;
}

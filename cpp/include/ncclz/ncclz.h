/* ncclz C API, shaped like nccl.h.
 *
 * Every function returns an ncclzResult_t; no C++ exception crosses this
 * boundary. After a failure, ncclzGetLastError() returns the message of the
 * last error raised on the calling thread (it says what failed, on which rank,
 * with which peer, op and size).
 *
 * Calls are blocking; there is no stream argument. Buffers are host memory,
 * or CUDA device memory after ncclzSetBufferDevice(device) on the calling
 * thread.
 * Compression is an explicit argument of every data call:
 *
 *   ncclzCompression_t c = ncclzCompressionLossyAbs(1e-3);
 *   ncclzAllReduce(send, recv, n, ncclzFloat32, ncclzSum, c, comm);
 *
 * A data call with an argument this API cannot take (an unknown type, op or
 * compression mode) returns ncclzInvalidArgument on its rank after taking part
 * in the call as refused, as the runtime's own checks do: the other ranks'
 * call returns ncclzRemoteError naming that rank, and every rank's next call
 * meets the others' next call.
 *
 * Error-bound contract (docs/ALGORITHMS.md, ARCHITECTURE.md): lossy results
 * are within the bound E of the exact fp64 result for every finite element;
 * lossless results are bit-identical to ncclzCompressionNone(); outputs are
 * bit-identical on every rank.
 */
#ifndef NCCLZ_H_
#define NCCLZ_H_

#include <stddef.h>

/* The library's version (pyproject.toml and CMakeLists.txt say the same; a test checks). */
#define NCCLZ_MAJOR 0
#define NCCLZ_MINOR 1
#define NCCLZ_PATCH 0
#define NCCLZ_VERSION_CODE (NCCLZ_MAJOR * 10000 + NCCLZ_MINOR * 100 + NCCLZ_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  ncclzSuccess = 0,
  ncclzInvalidArgument = 1, /* bad argument: type, op, bound, peer, root, ... */
  ncclzRemoteError = 2,     /* a peer failed or made a mismatched call */
  ncclzTimeout = 3,         /* a wait ran past NCCLZ_TIMEOUT */
  ncclzAborted = 4,         /* the communicator was aborted */
  ncclzCorruptData = 5,     /* compressed data did not decode */
  ncclzSystemError = 6,     /* a system call or allocation failed */
  ncclzInternalError = 7,   /* anything else */
  ncclzNumResults = 8
} ncclzResult_t;

typedef enum {
  ncclzFloat32 = 0,
  ncclzFloat64 = 1,
  ncclzFloat16 = 2,
  ncclzBfloat16 = 3,
  ncclzInt32 = 4,
  ncclzInt64 = 5,
  ncclzUint8 = 6,
  /* Reduced in their own order and division (max, min, avg); they travel as
   * uint8, int32 and int64 of the same bits. Exact modes only, as the other
   * integers. */
  ncclzInt8 = 7,
  ncclzUint32 = 8,
  ncclzUint64 = 9,
  /* The OCP 8-bit floats (NCCL's ncclFloat8e4m3 / ncclFloat8e5m2): e4m3fn
   * (no infinities, largest 448) and e5m2. Exact modes only; reductions in
   * their own arithmetic, rounded to nearest even, an overflow giving NaN
   * (e4m3fn) or inf (e5m2), never a clipped value (NCCL saturates). */
  ncclzFloat8e4m3 = 10,
  ncclzFloat8e5m2 = 11,
  ncclzNumTypes = 12
} ncclzDataType_t;

/* Same values as nccl.h's ncclRedOp_t. */
typedef enum { ncclzSum = 0, ncclzProd = 1, ncclzMax = 2, ncclzMin = 3, ncclzAvg = 4, ncclzNumOps = 5 } ncclzRedOp_t;

typedef enum {
  ncclzCompressNone = 0,     /* the plain collective */
  ncclzCompressLossless = 1, /* bit-identical to None */
  ncclzCompressLossyAbs = 2, /* |result - exact| <= bound */
  ncclzCompressLossyRel = 3  /* |result - exact| <= bound * (global max - global min) */
} ncclzCompressionMode_t;

typedef struct {
  ncclzCompressionMode_t mode;
  double bound;      /* E (LossyAbs) or r (LossyRel); ignored otherwise */
  const char* codec; /* NULL or "": the selector; else "raw", "block", "rans", "floatexp" */
  size_t minBytes;   /* messages under this many bytes go uncompressed (0: never) */
} ncclzCompression_t;

static inline ncclzCompression_t ncclzCompressionNone(void) {
  ncclzCompression_t c = {ncclzCompressNone, 0.0, NULL, 0};
  return c;
}
static inline ncclzCompression_t ncclzCompressionLossless(void) {
  ncclzCompression_t c = {ncclzCompressLossless, 0.0, NULL, 0};
  return c;
}
static inline ncclzCompression_t ncclzCompressionLossyAbs(double e) {
  ncclzCompression_t c = {ncclzCompressLossyAbs, e, NULL, 0};
  return c;
}
static inline ncclzCompression_t ncclzCompressionLossyRel(double r) {
  ncclzCompression_t c = {ncclzCompressLossyRel, r, NULL, 0};
  return c;
}

#define NCCLZ_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCLZ_UNIQUE_ID_BYTES];
} ncclzUniqueId;

typedef struct ncclzComm* ncclzComm_t;

/* Statistics of the last data call on a communicator. */
typedef struct {
  unsigned long long rawBytes;  /* bytes this rank would have sent uncompressed */
  unsigned long long wireBytes; /* bytes it sent */
  double ratio;                 /* rawBytes / wireBytes */
  double encodeSeconds, decodeSeconds, quantizeSeconds, waitSeconds, wallSeconds;
  double errorBound; /* E promised for the call (0 for exact modes) */
  int exactFallback; /* lossy call that ran exactly */
  int onDevice;      /* this rank ran the call on the GPU (device buffers: ncclzSetBufferDevice, docs/GPU.md) */
  int channels;      /* rings (or lanes) the call ran on */
  unsigned long long sliceBytes; /* data bytes per slice (0: the latency algorithm) */
} ncclzCallStats_t;

/* Made by one process (the future rank 0's), shared with the others out of band. */
/* The version of the library linked (NCCLZ_VERSION_CODE of the headers it was built with). */
ncclzResult_t ncclzGetVersion(int* version);

ncclzResult_t ncclzGetUniqueId(ncclzUniqueId* uniqueId);
ncclzResult_t ncclzCommInitRank(ncclzComm_t* comm, int nranks, ncclzUniqueId commId, int rank);
/* RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and NCCLZ_* from the environment. */
ncclzResult_t ncclzCommInitFromEnv(ncclzComm_t* comm);
ncclzResult_t ncclzCommDestroy(ncclzComm_t comm);
/* A new communicator of the ranks that pass the same color, ranked by key,
 * then by their rank in comm (NCCL's ncclCommSplit): called by every rank of
 * comm, in order with its other calls; NCCLZ_SPLIT_NOCOLOR sets *newcomm to
 * NULL. The new communicator takes comm's settings (a NCCLZ_TOPO_HOSTS layout
 * cut to its members). A color below NCCLZ_SPLIT_NOCOLOR on any rank fails the
 * call on every rank. */
#define NCCLZ_SPLIT_NOCOLOR (-1)
ncclzResult_t ncclzCommSplit(ncclzComm_t comm, int color, int key, ncclzComm_t* newcomm);
/* Makes pending and future calls on comm fail with ncclzAborted, here and on
 * every peer (their calls fail at once, naming this rank), then frees it. A
 * communicator runs one call at a time: a call made while another thread's
 * call on it runs fails with ncclzInvalidArgument and aborts it. */
ncclzResult_t ncclzCommAbort(ncclzComm_t comm);
ncclzResult_t ncclzCommCount(const ncclzComm_t comm, int* count);
ncclzResult_t ncclzCommUserRank(const ncclzComm_t comm, int* rank);

ncclzResult_t ncclzAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclzDataType_t datatype,
                             ncclzRedOp_t op, ncclzCompression_t compression, ncclzComm_t comm);
ncclzResult_t ncclzReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclzDataType_t datatype,
                                 ncclzRedOp_t op, ncclzCompression_t compression, ncclzComm_t comm);
ncclzResult_t ncclzAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclzDataType_t datatype,
                             ncclzCompression_t compression, ncclzComm_t comm);
/* The root's sendbuff goes to every rank's recvbuff (sendbuff is read on the root only). */
ncclzResult_t ncclzBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclzDataType_t datatype, int root,
                             ncclzCompression_t compression, ncclzComm_t comm);
/* The reduction of every rank's sendbuff goes to the root's recvbuff (count elements). recvbuff is used on the
 * root only (NULL elsewhere is fine); sendbuff == recvbuff on the root reduces in place. */
ncclzResult_t ncclzReduce(const void* sendbuff, void* recvbuff, size_t count, ncclzDataType_t datatype, ncclzRedOp_t op,
                          int root, ncclzCompression_t compression, ncclzComm_t comm);
/* Every rank's sendbuff (sendcount elements) goes to the root's recvbuff at offset rank*sendcount (nranks*sendcount
 * elements; used on the root only). */
ncclzResult_t ncclzGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclzDataType_t datatype, int root,
                          ncclzCompression_t compression, ncclzComm_t comm);
/* Block j of the root's sendbuff (nranks*recvcount elements; used on the root only) goes to rank j's recvbuff
 * (recvcount elements). */
ncclzResult_t ncclzScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclzDataType_t datatype, int root,
                           ncclzCompression_t compression, ncclzComm_t comm);
/* Block j of sendbuff (count elements at offset j*count) goes to rank j; rank j's block for this rank arrives at
 * offset j*count of recvbuff (nranks*count elements each, separate buffers). Needs the point-to-point links
 * (NCCLZ_P2P=1, the default). */
ncclzResult_t ncclzAllToAll(const void* sendbuff, void* recvbuff, size_t count, ncclzDataType_t datatype,
                            ncclzCompression_t compression, ncclzComm_t comm);
/* All-to-all with per-peer counts (nranks entries each, zeros allowed): sendcounts[j] elements to rank j,
 * recvcounts[j] from rank j, blocks back to back in rank order. Rank i's sendcounts[j] must equal rank j's
 * recvcounts[i]; a mismatch fails the call on every rank with ncclzRemoteError before any data moves. */
ncclzResult_t ncclzAllToAllv(const void* sendbuff, const size_t* sendcounts, void* recvbuff, const size_t* recvcounts,
                             ncclzDataType_t datatype, ncclzCompression_t compression, ncclzComm_t comm);
ncclzResult_t ncclzSend(const void* sendbuff, size_t count, ncclzDataType_t datatype, int peer,
                        ncclzCompression_t compression, ncclzComm_t comm);
ncclzResult_t ncclzRecv(void* recvbuff, size_t count, ncclzDataType_t datatype, int peer,
                        ncclzCompression_t compression, ncclzComm_t comm);
/* Groups (NCCL's ncclGroupStart / ncclGroupEnd): the data calls, sends, recvs and barriers a thread
 * makes between them return at once (a send or recv whose type or compression this API cannot take
 * returns its error then) and run at the outermost ncclzGroupEnd, which returns when all are complete:
 * each communicator's calls in order, its runs of sends and recvs together (a ring shift, a halo
 * exchange, both directions of one pair: Communicator::group in communicator.hpp), and several
 * communicators' calls at once, each on a thread of its own (one thread may drive several ranks),
 * each call with the buffer device (ncclzSetBufferDevice) it was made with. ncclzCommInitRank and
 * ncclzCommInitFromEnv in a group return a handle at once and create the communicator at
 * ncclzGroupEnd, each on its communicator's thread (one thread creates several ranks: NCCL's
 * pattern); calls queued for it in the group run after; a failed creation is ncclzGroupEnd's error
 * and the handle's calls fail saying why (destroy it). ncclzCommSplit in a group runs at
 * ncclzGroupEnd in order with its parent's queued calls and writes *newcomm then (the pointer must
 * stay valid). ncclzCommDestroy of a communicator with calls queued in the thread's open group is
 * refused; ncclzCommAbort cancels them. Buffers, counts arrays and codec names must stay valid until
 * ncclzGroupEnd; grouped sends and recvs on device buffers run on host copies. A group's peer may
 * group its calls too or make them one by one (ncclzSend then ncclzRecv, or the other way round),
 * keeping the order of its sends and of its recvs with this rank; at most
 * NCCLZ_NSLOTS (default 4) sends to and recvs from one peer per group. ncclzGroupEnd returns the
 * first failed call's result (its message: ncclzGetLastError); grouped sends and recvs that do not
 * match abort the communicator. */
ncclzResult_t ncclzGroupStart(void);
ncclzResult_t ncclzGroupEnd(void);
ncclzResult_t ncclzBarrier(ncclzComm_t comm);
/* Where the buffers of the calls this thread makes from now on live: -1, host memory (the default), or memory of
 * CUDA device `device` (one device per communicator). Every call takes device buffers: lossy calls quantize, code
 * and dequantize on that GPU (only coded bytes cross to the host), the others run on host copies. The work that
 * writes a call's input must be complete when the call starts; its output is complete when it returns.
 * ncclzInvalidArgument for device >= 0 where ncclz was built without CUDA. */
ncclzResult_t ncclzSetBufferDevice(int device);
ncclzResult_t ncclzCommGetLastStats(const ncclzComm_t comm, ncclzCallStats_t* stats);

const char* ncclzGetErrorString(ncclzResult_t result);
/* The message of the last error on the calling thread ("" if none). comm may be NULL. */
const char* ncclzGetLastError(ncclzComm_t comm);

#ifdef __cplusplus
}
#endif

#endif /* NCCLZ_H_ */

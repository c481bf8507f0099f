// The CUDA runtime's stream-capture and graph calls for CudaBackend's graph
// regions (Backend::RunGraph, cuda_backend_graphs.cc), compiled by nvcc
// (cuda_graphs.cu). Std types only, as runtime_shim.h (same reason). Each
// returns the cudaError_t value as an int (0 = success). CUgraph_st* /
// CUgraphExec_st* are the types cudaGraph_t / cudaGraphExec_t name.
#ifndef MOESERVE_KERNELS_CUDA_CUDA_GRAPHS_H_
#define MOESERVE_KERNELS_CUDA_CUDA_GRAPHS_H_

#include "kernels/cuda/runtime_shim.h"

struct CUgraph_st;
struct CUgraphExec_st;

namespace moeserve::kernels::cuda {

using Graph = CUgraph_st*;          // == cudaGraph_t
using GraphExec = CUgraphExec_st*;  // == cudaGraphExec_t

// cudaStreamBeginCapture in cudaStreamCaptureModeThreadLocal: only this
// thread's unsafe calls (a sync, a cudaMalloc) invalidate the capture, not
// the link workers' copies and event waits on their own streams.
int RtStreamBeginCapture(Strm stream);
// cudaStreamEndCapture; *graph is null when the capture was invalidated.
int RtStreamEndCapture(Strm stream, Graph* graph);
// *capturing: whether `stream` is being captured now.
int RtStreamIsCapturing(Strm stream, bool* capturing);
// cudaGraphInstantiate (flags 0).
int RtGraphInstantiate(GraphExec* exec, Graph graph);
int RtGraphLaunch(GraphExec exec, Strm stream);
int RtGraphDestroy(Graph graph);
int RtGraphExecDestroy(GraphExec exec);

}  // namespace moeserve::kernels::cuda

#endif  // MOESERVE_KERNELS_CUDA_CUDA_GRAPHS_H_

// Thin wrappers over the CUDA runtime's capture and graph calls (see
// cuda_graphs.h).
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_graphs.h"

namespace moeserve::kernels::cuda {

int RtStreamBeginCapture(Strm stream) {
  return cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
}
int RtStreamEndCapture(Strm stream, Graph* graph) {
  cudaGraph_t g = nullptr;
  const cudaError_t err = cudaStreamEndCapture(stream, &g);
  *graph = g;
  return err;
}
int RtStreamIsCapturing(Strm stream, bool* capturing) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t err = cudaStreamIsCapturing(stream, &status);
  *capturing = status != cudaStreamCaptureStatusNone;
  return err;
}
int RtGraphInstantiate(GraphExec* exec, Graph graph) {
  cudaGraphExec_t e = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&e, graph, 0);
  *exec = e;
  return err;
}
int RtGraphLaunch(GraphExec exec, Strm stream) {
  return cudaGraphLaunch(exec, stream);
}
int RtGraphDestroy(Graph graph) { return cudaGraphDestroy(graph); }
int RtGraphExecDestroy(GraphExec exec) { return cudaGraphExecDestroy(exec); }

}  // namespace moeserve::kernels::cuda

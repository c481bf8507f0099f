// CudaBackend's graph regions (Backend::RunGraph; issue 30 item 3): the
// first call with a key captures the body's ops on the stream
// (cudaStreamBeginCapture, thread-local mode), instantiates the graph once
// and launches it; later calls launch the instantiated graph. Member
// definitions of CudaBackend kept out of cuda_backend.cc.
#include <cstdio>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_graphs.h"
#include "kernels/cuda/cuda_stream.h"

namespace moeserve::kernels::cuda {

using base::MutexLock;

class CudaGraphCache {
 public:
  // A key's graph, or `eager` when its body could not be recorded.
  struct Entry {
    GraphExec exec = nullptr;
    bool eager = false;
  };

  ~CudaGraphCache() {
    for (auto& [key, entry] : map_) {
      if (entry.exec != nullptr) RtGraphExecDestroy(entry.exec);
    }
  }

  // The entry of `key`, if any.
  bool Find(const GraphKey& key, Entry* out) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    auto it = map_.find(key);
    if (it == map_.end()) return false;
    *out = it->second;
    return true;
  }

  // Stores `entry` for `key` unless one is there already (another thread
  // recorded it meanwhile); returns the entry stored. An `exec` not stored
  // is destroyed.
  Entry Insert(const GraphKey& key, Entry entry) ABSL_LOCKS_EXCLUDED(mu_) {
    Entry kept;
    {
      MutexLock lock(&mu_);
      auto [it, inserted] = map_.try_emplace(key, entry);
      kept = it->second;
      if (inserted) return kept;
    }
    if (entry.exec != nullptr) RtGraphExecDestroy(entry.exec);
    return kept;
  }

  void Drop(const void* owner) ABSL_LOCKS_EXCLUDED(mu_) {
    std::vector<GraphExec> dropped;
    {
      MutexLock lock(&mu_);
      for (auto it = map_.begin(); it != map_.end();) {
        auto at = it++;
        if (at->first.owner != owner) continue;
        if (at->second.exec != nullptr) dropped.push_back(at->second.exec);
        map_.erase(at);
      }
    }
    for (GraphExec e : dropped) RtGraphExecDestroy(e);
  }

  int64_t size() const ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return static_cast<int64_t>(map_.size());
  }

 private:
  mutable base::Mutex mu_;
  absl::flat_hash_map<GraphKey, Entry> map_ ABSL_GUARDED_BY(mu_);
};

std::shared_ptr<CudaGraphCache> NewCudaGraphCache() {
  return std::make_shared<CudaGraphCache>();
}

bool CudaBackend::SetGraphs(bool on) {
  graphs_on_.store(on);
  return on;
}

bool CudaBackend::graphs_enabled() const { return graphs_on_.load(); }

int64_t CudaBackend::graph_count() const { return graphs_->size(); }

void CudaBackend::DropGraphs(const void* owner) { graphs_->Drop(owner); }

absl::StatusOr<GraphRun> CudaBackend::RunGraph(
    Stream& s, const GraphKey& key, absl::FunctionRef<absl::Status()> body) {
  MOESERVE_ASSIGN_OR_RETURN(Strm st, RawStream(this, s));
  auto eager = [&]() -> absl::StatusOr<GraphRun> {
    MOESERVE_RETURN_IF_ERROR(body());
    return GraphRun::kEager;
  };
  if (!graphs_on_.load()) return eager();
  CudaGraphCache& cache = *graphs_;
  CudaGraphCache::Entry entry;
  if (cache.Find(key, &entry)) {
    if (entry.eager) return eager();
    MOESERVE_RETURN_IF_ERROR(
        FromCuda(RtGraphLaunch(entry.exec, st), "cudaGraphLaunch"));
    return GraphRun::kReplayed;
  }
  if (options_.max_graphs > 0 && cache.size() >= options_.max_graphs) {
    return eager();
  }
  bool capturing = false;
  MOESERVE_RETURN_IF_ERROR(
      FromCuda(RtStreamIsCapturing(st, &capturing), "cudaStreamIsCapturing"));
  if (capturing) {
    return absl::FailedPreconditionError(
        "RunGraph: the stream is already being captured (RunGraph inside a "
        "graph body)");
  }
  // A body that cannot be recorded (its capture invalidated, or the graph
  // not instantiable) runs eagerly, now and for every later call.
  auto unrecordable = [&](const char* what, int err) {
    RtGetLastError();  // Reported here; not the next launch's error.
    std::fprintf(stderr,
                 "moeserve: CUDA graph segment %lld could not be recorded "
                 "(%s: %s); it runs eagerly\n",
                 static_cast<long long>(key.segment), what, RtErrorName(err));
    cache.Insert(key, {.exec = nullptr, .eager = true});
    return eager();
  };
  MOESERVE_RETURN_IF_ERROR(
      FromCuda(RtStreamBeginCapture(st), "cudaStreamBeginCapture"));
  const absl::Status body_status = body();
  Graph graph = nullptr;
  const int end = RtStreamEndCapture(st, &graph);
  if (end != 0 || graph == nullptr) {
    if (graph != nullptr) RtGraphDestroy(graph);
    return unrecordable("cudaStreamEndCapture", end);
  }
  if (!body_status.ok()) {
    // An op refused its arguments: nothing is recorded, nothing ran.
    RtGraphDestroy(graph);
    return body_status;
  }
  GraphExec exec = nullptr;
  const int inst = RtGraphInstantiate(&exec, graph);
  RtGraphDestroy(graph);
  if (inst != 0) return unrecordable("cudaGraphInstantiate", inst);
  entry = cache.Insert(key, {.exec = exec, .eager = false});
  if (entry.eager) return eager();
  MOESERVE_RETURN_IF_ERROR(
      FromCuda(RtGraphLaunch(entry.exec, st), "cudaGraphLaunch"));
  return GraphRun::kCaptured;
}

}  // namespace moeserve::kernels::cuda

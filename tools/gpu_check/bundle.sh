#!/bin/bash
# Packs the opt-built GPU checks into one folder that runs on a machine with a
# GPU but without Bazel or Debian's libraries (the lent device machines run
# another distribution): the binaries, the CUDA plugin, the Python stubs, and
# every shared library they need except the C runtime, libstdc++ and CUDA's
# own (taken from the target's toolkit/driver). Used by run_gpu_checks.sh.
#
#   bazel build --config=opt $(tools/gpu_check/bundle.sh --targets)
#   tools/gpu_check/bundle.sh .gpu_bundle   # an ignored folder to carry
set -euo pipefail
TARGETS=(
  //kernels:grouped_experts_test
  //kernels/cuda:cuda_graph_region_test
  //kernels/cuda:cuda_memory_test
  //kernels/cuda:cuda_ops_differential_test
  //kernels/cuda:cuda_ops_benchmark
  //kernels/cuda:libmoeserve_cuda.so
  //engine:cuda_graphs_test
  //engine/spec_decode:external_drafter_test
  //engine:libmoeserve_spm.so
  //tests:cuda_parity_test
  //tests:policy_invariance_test
  //server:moeserve
  //proto:moeserve_pb2.py
  //proto:moeserve_pb2_grpc.py
  //tools/bench:moeserve_bench
)
if [[ "${1:-}" == "--targets" ]]; then
  echo "${TARGETS[@]}"
  exit 0
fi
out="${1:?usage: bundle.sh OUT_DIR | --targets}"
bin="$(bazel info --config=opt bazel-bin 2>/dev/null)"
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/proto"
for t in "${TARGETS[@]}"; do
  path="${t#//}"
  path="$bin/${path/://}"
  case "$path" in
    *.py) cp "$path" "$out/proto/" ;;
    *) cp "$path" "$out/bin/" ;;
  esac
done
touch "$out/proto/__init__.py"
# Libraries the target machine has itself (or must use its own of). ldd runs
# on the originals: Bazel's rpaths ($ORIGIN/../_solib_k8) resolve only there.
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libstdc\+\+|libgcc_s|libcuda\.|libcudart|libcublas)'
for t in "${TARGETS[@]}"; do
  [[ "$t" == *.py ]] && continue
  f="${t#//}"
  f="$bin/${f/://}"
  ldd "$f" | awk '/=> \//{print $1, $3}' | while read -r name file; do
    [[ "$name" =~ $skip ]] && continue
    [[ -e "$out/lib/$name" ]] || cp -L "$file" "$out/lib/$name"
  done
done
strip --strip-unneeded "$out"/bin/* "$out"/lib/* 2>/dev/null || true
du -sh "$out/bin" "$out/lib"

"""Detects the CUDA toolkit on the host (no download, nothing vendored).

Creates the repository @local_cuda with one file, defs.bzl:
  CUDA_AVAILABLE  True when <cuda>/bin/nvcc, cuda_runtime.h and the cudart and
                  cublasLt libraries exist.
  CUDA_PATH       the toolkit root (MOESERVE_CUDA_PATH, default /usr/local/cuda).
BUILD files use it to build the CUDA backend only where the toolkit is
installed; without it every CUDA target is tagged manual and the server links
the CPU backend alone. A GPU is never needed at build time.
"""

def _cuda_configure_impl(rctx):
    root = rctx.os.environ.get("MOESERVE_CUDA_PATH", "/usr/local/cuda")
    needed = [
        root + "/bin/nvcc",
        root + "/include/cuda_runtime.h",
        root + "/include/cublasLt.h",
        root + "/lib64/libcudart.so",
        root + "/lib64/libcublasLt.so",
    ]
    available = True
    for f in needed:
        if not rctx.path(f).exists:
            available = False
    if rctx.os.environ.get("MOESERVE_DISABLE_CUDA", "") == "1":
        available = False
    rctx.file("defs.bzl", "CUDA_AVAILABLE = %s\nCUDA_PATH = \"%s\"\n" % (
        "True" if available else "False",
        root,
    ))
    rctx.file("BUILD", "exports_files([\"defs.bzl\"])\n")

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["MOESERVE_CUDA_PATH", "MOESERVE_DISABLE_CUDA"],
    local = True,
)

"""Build switches for the optional CUDA backend (see cuda_configure.bzl)."""

load("@local_cuda//:defs.bzl", "CUDA_AVAILABLE", "CUDA_PATH")

# Tags for CUDA targets: built and tested by `//...` where the toolkit is
# installed (tests skip without a GPU), manual elsewhere.
# Every CUDA target carries "cuda" (GPU runs select them with
# --test_tag_filters=cuda); without the toolkit they are also "manual", so
# `//...` does not try to build them.
CUDA_TAGS = ["cuda"] if CUDA_AVAILABLE else ["cuda", "manual"]

NVCC = CUDA_PATH + "/bin/nvcc"

CUDA_LINKOPTS = [
    "-L" + CUDA_PATH + "/lib64",
    "-Wl,-rpath," + CUDA_PATH + "/lib64",
    "-lcudart",
    "-lcublasLt",
]

def if_cuda(with_cuda, without_cuda = []):
    """`with_cuda` where the toolkit is installed, else `without_cuda`."""
    return with_cuda if CUDA_AVAILABLE else without_cuda

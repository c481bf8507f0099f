"""Build switches for the optional CUDA backend (see cuda_configure.bzl)."""

load("@local_cuda//:defs.bzl", "CUDA_AVAILABLE", "CUDA_PATH")

# Tags for CUDA targets: built and tested by `//...` where the toolkit is
# installed (tests skip without a GPU), manual elsewhere.
CUDA_TAGS = [] if CUDA_AVAILABLE else ["manual"]

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

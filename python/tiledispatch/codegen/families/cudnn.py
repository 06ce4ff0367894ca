"""cudnn (cuda, convolution): cuDNN's convolution as a kernel of the registry
(bindings/cuda/conv_cudnn.cuh), every direction and rank, fp16 and bf16: selection weighs the
vendor against our families, so no layer runs slower than cuDNN by more than the dispatcher's
misjudgment. Built where cuDNN's headers are found (the nvidia-cudnn wheel, the toolkit,
CUDNN_ROOT); the library is opened at run time."""
from __future__ import annotations

from dataclasses import dataclass

from ..model import Backend
from .sm90 import half_precision_problems
from .vendor import Vendor


@dataclass(frozen=True)
class Cudnn(Vendor):
    FAMILY = "cudnn"
    CODE = 12
    BACKEND = Backend.CUDA
    OPS = ("conv",)
    HEADER = "cuda/conv_cudnn.cuh"
    COST = {"conv": "cudnn_conv_cost"}
    COST_SOURCE = "cost/cudnn.cpp"
    TOKEN = "cudnn"
    VENDOR_LIBRARY = "cudnn"

    def vendor_problems(self, op, dtype, layout, variant) -> list[str]:
        return half_precision_problems("the cudnn family's kernels", dtype)

    def instance(self, config) -> str:
        return f"cuda::CudnnConv<{config.dtype.code}, {config.ndim}, {config.direction.code}>"

"""fp8 GEMM accuracy by accumulation mode, against float64 on the same fp8 inputs, with
cuBLASLt (torch._scaled_mm, default and use_fast_accum=True) in the same run.

    python bench/fp8_accuracy.py [--ks 1024 4096 16384 65536] [--json OUT]

For each K: M = N = 256, inputs uniform in [-1, 1) (zero mean) and in [0, 1) (all products
positive: the running sum grows with K, where a short accumulator loses the most). Prints
the relative error ||C - C64|| / ||C64|| of each fp8 kernel and of cuBLASLt; bf16 output
rounding alone is about 2^-9 / sqrt(3) = 1.1e-3.
"""
from __future__ import annotations

import argparse
import json

import torch

import tiledispatch as td
from tiledispatch.codegen import DType


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ks", nargs="+", type=int, default=[1024, 4096, 16384, 65536])
    parser.add_argument("--json")
    args = parser.parse_args()
    d = td.Dispatcher("gemm")
    kernels = [k for k in d.kernels if k.dtype is DType.FP8_E4M3 and k.layout.key == "rcr"]
    stream = torch.cuda.current_stream().cuda_stream
    gen = torch.Generator(device="cuda").manual_seed(7)
    one = torch.ones((), device="cuda")
    M = N = 256
    rows = []
    print(f"relative error ||C - C64|| / ||C64||, M = N = {M}")
    for low in (-1.0, 0.0):
        for K in args.ks:
            a = (torch.rand(M, K, generator=gen, device="cuda") * (1 - low) + low).to(torch.float8_e4m3fn)
            b = (torch.rand(N, K, generator=gen, device="cuda") * (1 - low) + low).to(torch.float8_e4m3fn).t()
            ref = a.double() @ b.double()
            err = {}
            for fast in (False, True):
                c = torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=fast)
                err["cuBLASLt" + (" fast" if fast else "")] = float((c.double() - ref).norm() / ref.norm())
            problem = td.GemmProblem(M, N, K, DType.FP8_E4M3, "rcr", a.stride(0), b.stride(1), N)
            for k in kernels:
                if not d.is_supported(problem, k.name):
                    continue
                c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
                d.run(problem, a.data_ptr(), b.data_ptr(), c.data_ptr(), kernel=k.name, stream=stream, timed=False)
                torch.cuda.synchronize()
                err[k.name] = float((c.double() - ref).norm() / ref.norm())
            inputs = f"[{low:g}, 1)"
            print(f"\nK {K}, inputs {inputs}")
            for name, e in sorted(err.items(), key=lambda x: x[1]):
                print(f"  {e:9.2e}  {name}")
            rows.append({"K": K, "inputs": inputs, "errors": err})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

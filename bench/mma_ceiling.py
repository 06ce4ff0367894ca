"""Tensor-core issue ceilings on sm_90a: what mma.sync and wgmma can do at all, with no
memory traffic, so that a convolution's TFLOP/s can be read against the hardware.

Writes a CUDA file, compiles it with nvcc (-arch sm_90a) and runs it; prints TFLOP/s of
  - mma.sync m16n8k16 bf16 -> fp32, register operands, 8 independent accumulators a warp;
  - wgmma m64nNk16 bf16 -> fp32 for N = 8 .. 128, A and B from shared memory (SS, no swizzle
    and 128-byte swizzle) or A from registers (RS), 16 wgmmas per commit group,
at several warps / warpgroups per SM (one wave: 132 SMs x blocks per SM).
The operands hold zeros: only the issue rate is measured.

    python3 bench/mma_ceiling.py                 (on the GPU machine; nvcc on PATH)
    python3 bench/mma_ceiling.py --compile-only  (CI: compiles, runs nothing)

The floor of the grouped 3D convolution: it has 16 output channels a group, so its GEMM
has N = 16 (bench/RESULTS.md).
"""
import pathlib
import subprocess
import sys
import tempfile

NS = [8, 16, 32, 64, 128]
CONFIGS = [(128, 1), (256, 2), (512, 1), (384, 2), (512, 2)]  # (threads a block, blocks a SM)
SMEM = 100 * 1024  # per block: 4 warpgroups x (A 8 KB + B 16 KB) with room for the k offsets

HEAD = r"""
#include <cstdint>
#include <cstdio>
#include <cuda_runtime.h>
__device__ __forceinline__ uint64_t desc(const void* p, unsigned lbo, unsigned sbo, unsigned sw) {
  unsigned a = (unsigned)__cvta_generic_to_shared(p);
  return (uint64_t)((a >> 4) & 0x3FFF) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) |
         ((uint64_t)((sbo >> 4) & 0x3FFF) << 32) | ((uint64_t)sw << 62);
}
__global__ void __launch_bounds__(512) k_mma(float* sink, int iters) {
  float d[8][4] = {};
  unsigned a0 = threadIdx.x, a1 = 1, a2 = 2, a3 = 3, b0 = 5, b1 = 7;
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int k = 0; k < 2; ++k)
#pragma unroll
      for (int i = 0; i < 8; ++i)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
  float s = 0;
  for (int i = 0; i < 8; ++i) for (int j = 0; j < 4; ++j) s += d[i][j];
  if (s == 123.f) sink[threadIdx.x] = s;
}
"""

KERNEL = r"""
template <int SW> __global__ void __launch_bounds__(512) k_{mode}_{n}(float* sink, int iters) {{
  extern __shared__ __align__(1024) unsigned char sm[];
  float d[{nr}];
  for (int i = 0; i < {nr}; ++i) d[i] = 0.f;
  unsigned r[4] = {{threadIdx.x, 1u, 2u, 3u}};
  (void)r;
  const int wg = threadIdx.x / 128;
  for (int i = threadIdx.x; i < {smem} / 4; i += blockDim.x) ((unsigned*)sm)[i] = 0;
  __syncthreads();
  const unsigned lbo = SW ? 16 : 128, sbo = SW ? 1024 : 256;
  unsigned char* a_s = sm + wg * 24576;
  unsigned char* b_s = a_s + 8192;
  for (int it = 0; it < iters; ++it) {{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int k = 0; k < 16; ++k) {{
      uint64_t b = desc(b_s + (k & 3) * 32, lbo, sbo, SW);
      {call}
    }}
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  }}
  float s = 0;
  for (int i = 0; i < {nr}; ++i) s += d[i];
  if (s == 123.f) sink[threadIdx.x] = s;
}}
"""

MAIN = r"""
template <typename K> void timeit(const char* name, K kern, int n, int threads, int per_sm, int smem, bool wg) {
  float* sink;
  cudaMalloc(&sink, 4096);
  cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  const int iters = wg ? 2000 : 4000, grid = 132 * per_sm;
  kern<<<grid, threads, smem>>>(sink, 10);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a);
  kern<<<grid, threads, smem>>>(sink, iters);
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms;
  cudaEventElapsedTime(&ms, a, b);
  const double flops = wg ? 2.0 * 64 * n * 16 * 16.0 * iters * (threads / 128) * grid
                          : 2.0 * 16 * 8 * 16 * 16.0 * iters * (threads / 32) * grid;
  const cudaError_t e = cudaGetLastError();
  if (wg) printf("%-18s N=%3d  warpgroups/SM=%d (%d a block)  %7.1f TFLOP/s %s\n", name, n, threads / 128 * per_sm, threads / 128, flops / ms / 1e9, e ? cudaGetErrorString(e) : "");
  else printf("%-18s N=  8  warps/SM=%2d                  %7.1f TFLOP/s %s\n", name, threads / 32 * per_sm, flops / ms / 1e9, e ? cudaGetErrorString(e) : "");
}
int main() {
"""


def wgmma_asm(n, mode):
    nr = n // 2
    regs = ", ".join("%%%d" % i for i in range(nr))
    outs = ", ".join('"+f"(d[%d])' % i for i in range(nr))
    shape = f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16"
    pred = r"{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
    if mode == "ss":
        return (f'uint64_t a = desc(a_s + (k & 3) * 32, lbo, sbo, SW); asm volatile("{pred}{shape} {{{regs}}}, '
                f'%{nr}, %{nr + 1}, p, 1, 1, 0, 0;\\n}}\\n" : {outs} : "l"(a), "l"(b));')
    return (f'asm volatile("{pred}{shape} {{{regs}}}, {{%{nr}, %{nr + 1}, %{nr + 2}, %{nr + 3}}}, %{nr + 4}, '
            f'p, 1, 1, 0;\\n}}\\n" : {outs} : "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]), "l"(b));')


def source():
    parts = [HEAD]
    for n in NS:
        for mode in ("ss", "rs"):
            parts.append(KERNEL.format(mode=mode, n=n, nr=n // 2, smem=SMEM, call=wgmma_asm(n, mode)))
    parts.append(MAIN)
    for t, b in [(128, 1), (256, 1), (256, 2), (512, 2), (512, 3)]:
        parts.append(f'  timeit("mma.sync m16n8k16", k_mma, 8, {t}, {b}, 0, false);\n')
    for n in NS:
        for mode, sw, label in (("ss", 0, "wgmma SS"), ("ss", 1, "wgmma SS sw128"), ("rs", 0, "wgmma RS")):
            for t, b in CONFIGS:
                parts.append(f'  timeit("{label}", k_{mode}_{n}<{sw}>, {n}, {t}, {b}, {SMEM}, true);\n')
    parts.append("}\n")
    return "".join(parts)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        src = pathlib.Path(tmp) / "mma_ceiling.cu"
        exe = pathlib.Path(tmp) / "mma_ceiling"
        src.write_text(source())
        build = ["nvcc", "-gencode", "arch=compute_90a,code=sm_90a", "-O3", "-o", str(exe), str(src)]
        done = subprocess.run(build, capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"nvcc failed:\n{done.stderr}")
        if "C7514" in done.stderr:  # ptxas serialized the wgmmas: the numbers would be latencies
            sys.exit("ptxas serialized the wgmma instructions (C7514): the numbers would not be ceilings")
        if "--compile-only" in sys.argv[1:]:
            print(f"mma_ceiling: compiled {exe.stat().st_size} bytes")
            return
        sys.exit(subprocess.run([str(exe)]).returncode)


if __name__ == "__main__":
    main()

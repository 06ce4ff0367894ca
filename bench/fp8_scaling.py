"""fp8 scaling on the GPU, over the LLM zoo's GEMM shapes (bench/zoo/gemm_layers.json), same run:

    python bench/fp8_scaling.py [--tokens 128 4096] [--max-shapes 40] [--repeat 20] [--json OUT]
    python bench/fp8_scaling.py --dry-run     (the shapes and the plan; no torch, no GPU)

(a) row-wise: D = (A B) * scale_a[i] * scale_b[j] (fp32 scales, bf16 D) through the library's
    kernels that implement row and column scales (problem row_scale / col_scale, the scales
    passed as epilogue operands) against torch._scaled_mm with scale_a (M, 1), scale_b (1, N),
    out_dtype bf16. ratio = torch's time over ours (> 1: ours faster).
(b) block-wise 128x128 (1x128 blocks of A, 128x128 of B, the cutlass_blockwise kernels): its
    time against the library's per-tensor fp8 GEMM (alpha) on the same shape; fraction = the
    per-tensor time over the block-wise time (throughput fraction; the target is >= 0.8). Where
    torch runs block-wise scaled fp8 on this GPU its time is shown too.

Shapes: e4m3, rcr (a torch Linear), M = tokens; those with N and K multiples of 16 (TMA and
torch._scaled_mm). Timing as bench/gemm.py: CUDA events around each run, L2 flushed before
each (a 512 MiB write), median of --repeat after warm-up, round-robin. A shape no kernel of
this build takes is reported as such, not timed. Summary: geomean and min of each ratio.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHAPES_FILE = HERE / "zoo" / "gemm_layers.json"
BLOCK = 128
TARGET_FRACTION = 0.8
DEFAULT_TOKENS = (128, 512, 2048, 4096)


# ---------------------------------------------------------------- pure logic (no torch)

def load_shapes(path=SHAPES_FILE, tokens=DEFAULT_TOKENS, max_shapes=None) -> list:
    """(M, N, K) of the zoo's shapes whose M is one of `tokens` and whose N and K are
    multiples of 16, unique, ordered by M then N then K; at most max_shapes, spread evenly."""
    doc = json.loads(Path(path).read_text())
    out = sorted({(s["M"], s["N"], s["K"]) for s in doc["shapes"]
                  if s["M"] in tokens and s["N"] % 16 == 0 and s["K"] % 16 == 0})
    if max_shapes and len(out) > max_shapes:
        step = len(out) / max_shapes
        out = [out[int(i * step)] for i in range(max_shapes)]
    return out


def scale_shapes(M: int, N: int, K: int) -> dict:
    """The scale tensors' shapes of each scaling (block-wise: row-major)."""
    kb, nb = -(-K // BLOCK), -(-N // BLOCK)
    return {"row_wise": {"scale_a": (M, 1), "scale_b": (1, N)},
            "block_wise": {"scale_a": (M, kb), "scale_b": (kb, nb)}}


def geomean(values) -> float:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def summary(rows, key: str) -> dict:
    values = [r[key] for r in rows if r.get(key)]
    return {"n": len(values), "geomean": geomean(values), "min": min(values) if values else float("nan")}


def table(rows) -> str:
    lines = [f"{'M':>6} {'N':>7} {'K':>6} | {'row us':>8} {'torch':>8} {'ratio':>6} | "
             f"{'block us':>8} {'tensor':>8} {'frac':>5} {'torch bw':>8} | kernels"]
    fmt = lambda v, d=1: f"{v:.{d}f}" if isinstance(v, (int, float)) and v == v else "-"  # noqa: E731
    for r in rows:
        lines.append(f"{r['M']:>6} {r['N']:>7} {r['K']:>6} | {fmt(r.get('row_us')):>8} {fmt(r.get('torch_row_us')):>8} "
                     f"{fmt(r.get('row_ratio'), 2):>6} | {fmt(r.get('block_us')):>8} {fmt(r.get('tensor_us')):>8} "
                     f"{fmt(r.get('block_fraction'), 2):>5} {fmt(r.get('torch_block_us')):>8} | "
                     f"{r.get('row_kernel', '-')} {r.get('block_kernel', '-')}")
    row, block = summary(rows, "row_ratio"), summary(rows, "block_fraction")
    lines.append(f"row-wise vs torch._scaled_mm: geomean {fmt(row['geomean'], 3)}, min {fmt(row['min'], 3)} "
                 f"({row['n']} shapes)")
    lines.append(f"block-wise / per-tensor throughput: geomean {fmt(block['geomean'], 3)}, min "
                 f"{fmt(block['min'], 3)} ({block['n']} shapes; target >= {TARGET_FRACTION})")
    return "\n".join(lines)


# ---------------------------------------------------------------- measurement (torch, GPU)

def measure(shapes, repeat: int) -> list:
    import torch

    import tiledispatch as td
    sys.path.insert(0, str(HERE))
    from gemm import Timer  # bench/gemm.py's timing: events, L2 flush, round-robin medians

    timer = Timer(repeat)
    d = td.Dispatcher("gemm")
    stream = torch.cuda.current_stream().cuda_stream
    print(f"device {torch.cuda.get_device_name()}, target {d.target}, {len(d.kernels)} kernels", flush=True)
    fp8 = torch.float8_e4m3fn
    rows = []
    for M, N, K in shapes:
        row = {"M": M, "N": N, "K": K}
        a = (torch.rand(M, K, device="cuda") * 4 - 2).to(fp8)
        b = (torch.rand(N, K, device="cuda") * 4 - 2).to(fp8).t()  # (K, N) column-major: rcr
        out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        shapes_of = scale_shapes(M, N, K)
        sa_row = torch.rand(*shapes_of["row_wise"]["scale_a"], device="cuda") + 0.5
        sb_row = torch.rand(*shapes_of["row_wise"]["scale_b"], device="cuda") + 0.5
        sa_blk = torch.rand(*shapes_of["block_wise"]["scale_a"], device="cuda") + 0.5
        sb_blk = torch.rand(*shapes_of["block_wise"]["scale_b"], device="cuda") + 0.5
        base = dict(M=M, N=N, K=K, dtype="fp8_e4m3", layout="rcr", lda=K, ldb=K, ldc=N)
        problems = {
            "row": (td.GemmProblem(**base, row_scale=True, col_scale=True),
                    {"row_scale": sa_row.data_ptr(), "col_scale": sb_row.data_ptr()}),
            "block": (td.GemmProblem(**base, block_scale=True),
                      {"scale_a": sa_blk.data_ptr(), "scale_b": sb_blk.data_ptr()}),
            "tensor": (td.GemmProblem(**base, alpha=0.75), None),
        }
        fns = {}
        for key, (problem, epilogue) in problems.items():
            try:
                row[f"{key}_kernel"] = d.select(problem)
            except td.UnsupportedProblemError as err:
                row[f"{key}_error"] = str(err).splitlines()[0]
                continue
            fns[key] = (lambda p=problem, e=epilogue: d.run(p, a.data_ptr(), b.data_ptr(), out.data_ptr(),
                                                            stream=stream, timed=False, epilogue=e))
        one = torch.ones((), device="cuda")
        fns["torch_row"] = lambda: torch._scaled_mm(a, b, scale_a=sa_row, scale_b=sb_row, out_dtype=torch.bfloat16)
        fns["torch_tensor"] = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        block_fn = torch_block_wise(a, b, sa_blk, sb_blk)
        if block_fn:
            fns["torch_block"] = block_fn
        for name, fn in list(fns.items()):  # a first call that fails drops the entry, with the reason
            try:
                fn()
                torch.cuda.synchronize()
            except Exception as err:  # noqa: BLE001 (torch and the library raise several kinds)
                row[f"{name}_error"] = str(err).splitlines()[0][:160]
                del fns[name]
        for name, ms in timer.many(fns).items():
            row[f"{name}_us"] = 1000.0 * ms
        if "row_us" in row:
            row["row_ratio"] = row["torch_row_us"] / row["row_us"]
        if "block_us" in row and "tensor_us" in row:
            row["block_fraction"] = row["tensor_us"] / row["block_us"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def torch_block_wise(a, b, sa, sb):
    """torch's block-wise scaled fp8 GEMM on these operands as a function, or None where this
    torch has no such entry (scales outer-dim-major, as torch wants them)."""
    import torch
    F = torch.nn.functional
    sa_t, sb_t = sa.t().contiguous().t(), sb.t().contiguous().t()
    if hasattr(F, "scaled_mm") and hasattr(F, "ScalingType"):
        return lambda: F.scaled_mm(a, b, sa_t, F.ScalingType.BlockWise1x128, sb_t, F.ScalingType.BlockWise128x128,
                                   output_dtype=torch.bfloat16)
    return lambda: torch._scaled_mm(a, b, scale_a=sa_t, scale_b=sb_t, out_dtype=torch.bfloat16)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, nargs="+", default=list(DEFAULT_TOKENS),
                        help="the zoo's token counts (M) to take shapes of")
    parser.add_argument("--max-shapes", type=int, default=40, help="at most this many shapes, spread evenly")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json", help="write every measurement here")
    parser.add_argument("--dry-run", action="store_true", help="print the shapes and the scale shapes; no GPU")
    args = parser.parse_args(argv)
    shapes = load_shapes(tokens=tuple(args.tokens), max_shapes=args.max_shapes)
    if args.dry_run:
        for M, N, K in shapes:
            s = scale_shapes(M, N, K)
            print(f"{M} x {N} x {K}: row-wise {s['row_wise']}, block-wise {s['block_wise']}")
        print(f"{len(shapes)} shapes (tokens {', '.join(map(str, args.tokens))})")
        return 0
    rows = measure(shapes, args.repeat)
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "row_wise": summary(rows, "row_ratio"),
                                               "block_wise": summary(rows, "block_fraction")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

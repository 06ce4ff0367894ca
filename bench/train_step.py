"""Training-step benchmark: timm models with and without tiledispatch.torch.patch.

    # GPU (the installed tiledispatch with its sm_90a libraries, torch, timm)
    python3 bench/train_step.py [--models efficientnet_b0,mobilenetv3_large_100,...] [--batch 64] [--size 224]
                                [--steps 20] [--reps 20] [--modes eager,compiled] [--backend inductor]
                                [--profile] [--json out.json]

    # anywhere: a tiny torch-only model on CPU, a few steps (no timm): proves the script runs
    python3 bench/train_step.py --smoke

Per model, mode (eager, or torch.compile of the model) and variant (torch's layers, or the
model after patch(), which swaps its grouped and depthwise convolutions): bf16 autocast,
channels-last, SGD with momentum, cudnn.benchmark on (torch's own layers at their fastest).
`--steps` steps from one seed (the same parameters, the same batches) give the loss curve;
the patched curve must match torch's within --loss-rtol (exit code 1 otherwise). Then
`--reps` timed steps (forward, backward, optimizer step, synchronized at both ends) give
images/s; the ratio is patched over torch. --profile adds the share of CUDA time spent in
convolutions (torch.profiler, over 3 steps): the device time of aten::convolution,
aten::convolution_backward and the tiledispatch conv ops over the device time of all kernels;
and a step's device time, its convolutions' device time and their ops' host time (ms).
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import time

import torch
import torch.nn as nn

import tiledispatch.torch as tdt

MODELS = ("efficientnet_b0", "mobilenetv3_large_100", "convnext_tiny", "regnety_032", "resnext50_32x4d")
CONV_OPS = ("aten::convolution", "aten::convolution_backward", "tiledispatch::conv", "tiledispatch::conv_bwd_data",
            "tiledispatch::conv_bwd_weight")


def tiny_model(num_classes: int) -> nn.Module:
    """A small torch-only network with dense, depthwise and grouped convolutions."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 1, groups=4), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, num_classes))


def build(name: str, num_classes: int) -> nn.Module:
    if name == "tiny":
        return tiny_model(num_classes)
    import timm  # the GPU run's dependency only
    return timm.create_model(name, num_classes=num_classes)


def batches(args, device):
    """The same inputs and labels for every variant: channels-last images, random labels."""
    g = torch.Generator().manual_seed(args.seed)
    out = []
    for _ in range(args.steps):
        x = torch.randn(args.batch, 3, args.size, args.size, generator=g)
        y = torch.randint(0, args.classes, (args.batch,), generator=g)
        out.append((x.to(device).contiguous(memory_format=torch.channels_last), y.to(device)))
    return out


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Trainer:
    """One model's training step: bf16 autocast, channels-last, SGD."""

    def __init__(self, model, args, device, compiled: bool):
        self.model, self.device = model, device
        self.opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
        self.forward = torch.compile(model, backend=args.backend) if compiled else model
        self.loss_fn = nn.CrossEntropyLoss()

    def step(self, x, y):
        with torch.autocast(self.device.type, dtype=torch.bfloat16):
            loss = self.loss_fn(self.forward(x), y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss


def conv_profile(trainer, data, device) -> dict | None:
    """Over 3 profiled steps (None off CUDA): the share of device time in convolutions, the
    device time of a step and of its convolutions (ms), and the host time of the conv ops a step
    (ms; CPU time of the op calls, their children included): a step slower than its device
    time says the host is behind."""
    if device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile
    steps = data[:3]
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for x, y in steps:
            trainer.step(x, y)
        synchronize(device)
    events = prof.key_averages()
    total = sum(e.self_device_time_total for e in events)
    conv = sum(e.device_time_total for e in events if e.key in CONV_OPS)
    host = sum(e.cpu_time_total for e in events if e.key in CONV_OPS)
    n = len(steps)
    return {"conv_share": conv / total if total else None, "device_ms": total / 1e3 / n,
            "conv_device_ms": conv / 1e3 / n, "conv_host_ms": host / 1e3 / n}


def run_variant(name, base, args, device, data, patched: bool, compiled: bool) -> dict:
    torch._dynamo.reset()
    torch.manual_seed(args.seed)   # the same dropout masks in every variant
    model = copy.deepcopy(base)
    report = tdt.patch(model) if patched else None
    trainer = Trainer(model, args, device, compiled)
    losses = [trainer.step(x, y).item() for x, y in data]   # the loss curve (compilation included)
    synchronize(device)
    start = time.perf_counter()
    for i in range(args.reps):
        x, y = data[i % len(data)]
        trainer.step(x, y)
    synchronize(device)
    seconds = (time.perf_counter() - start) / args.reps
    result = {"model": name, "variant": "patched" if patched else "torch", "mode": "compiled" if compiled else "eager",
              "swapped": len(report.swapped) if report else 0, "losses": losses, "step_ms": seconds * 1e3,
              "images_per_s": args.batch / seconds}
    if args.profile:
        result.update(conv_profile(trainer, data, device) or {"conv_share": None})
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=20, help="steps of the compared loss curve")
    parser.add_argument("--reps", type=int, default=20, help="timed steps")
    parser.add_argument("--modes", default="eager,compiled")
    parser.add_argument("--backend", default="inductor", help="torch.compile backend of the compiled mode")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--loss-rtol", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true", help="the conv share of CUDA time (torch.profiler)")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--smoke", action="store_true",
                        help="CPU, a tiny torch-only model, batch 4 at 32x32, 3 steps, compiled with aot_eager")
    args = parser.parse_args(argv)
    if args.smoke:
        args.models, args.batch, args.size, args.classes, args.steps, args.reps = "tiny", 4, 32, 10, 3, 2
        args.backend = "aot_eager"
    device = torch.device("cpu" if args.smoke or not torch.cuda.is_available() else "cuda")
    torch.backends.cudnn.benchmark = True   # torch's layers at their fastest: cuDNN times its engines
    modes = [m for m in args.modes.split(",") if m]
    results, failed = [], []
    for name in [m for m in args.models.split(",") if m]:
        torch.manual_seed(args.seed)
        base = build(name, args.classes).to(device).to(memory_format=torch.channels_last)
        data = batches(args, device)
        for mode in modes:
            pair = [run_variant(name, base, args, device, data, patched, mode == "compiled")
                    for patched in (False, True)]
            theirs, ours = pair
            worst = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(ours["losses"], theirs["losses"]))
            ours["loss_rel_diff"], ours["ratio"] = worst, ours["images_per_s"] / theirs["images_per_s"]
            if worst > args.loss_rtol:
                failed.append(f"{name} {mode}: loss differs by {worst:.3g} (relative) from torch's")
            results += pair
            print(f"{name:24s} {mode:8s} torch {theirs['images_per_s']:9.1f} img/s  patched "
                  f"{ours['images_per_s']:9.1f} img/s  ratio {ours['ratio']:.3f}  swapped {ours['swapped']:3d}  "
                  f"loss rel diff {worst:.2e}"
                  + (f"  conv share {theirs['conv_share']:.2f} -> {ours['conv_share']:.2f}"
                     f"  device ms/step {theirs['device_ms']:.1f} -> {ours['device_ms']:.1f}"
                     f"  conv device ms {theirs['conv_device_ms']:.1f} -> {ours['conv_device_ms']:.1f}"
                     f"  conv host ms {theirs['conv_host_ms']:.1f} -> {ours['conv_host_ms']:.1f}"
                     if ours.get("conv_share") is not None and theirs.get("conv_share") is not None else ""),
                  flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"device": str(device), "torch": torch.__version__, "args": vars(args), "results": results},
                      fh, indent=1)
    for line in failed:
        print("FAILED", line, file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

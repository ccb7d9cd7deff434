#!/usr/bin/python3
"""PyTorch's side of bench/data_parallel.py: DistributedDataParallel over
gloo (CPU), one process per rank, the models and optimizers of
bench/torch_step.py on random data.

    bench/.venv/bin/torchrun --nproc_per_node 2 bench/torch_ddp.py --model resnet18 --batch 32 --steps 8 --threads 1

--batch is per rank (the global batch is batch x ranks). Rank 0 prints one
JSON line: images_per_s of the job (global samples over the timed steps),
the seconds per step, and every rank's VmHWM at the end.
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from torch_step import case_arguments, make_case, vm_hwm  # noqa: E402


def main():
    ap = case_arguments(model="resnet18", batch=32, steps=8, warmup=1, threads=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    # torch_step's model and optimizer; DDP wraps the same parameter tensors.
    m, x, y, opt = make_case(a)
    ddp = torch.nn.parallel.DistributedDataParallel(m)
    loss_fn = torch.nn.functional.cross_entropy

    def step():
        out = ddp(x)
        loss = loss_fn(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(a.warmup):
        step()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    dist.barrier()
    seconds = time.perf_counter() - t0
    peaks = [None] * world
    dist.all_gather_object(peaks, vm_hwm())
    if rank == 0:
        print(json.dumps({"model": a.model, "ranks": world, "batch_per_rank": a.batch, "threads": a.threads,
                          "steps": a.steps, "seconds_per_step": seconds / a.steps,
                          "images_per_s": a.batch * world * a.steps / seconds, "rank_peak_rss_bytes": peaks,
                          "torch": torch.__version__}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

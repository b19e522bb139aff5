#!/usr/bin/python3
"""bench_allreduce_gloo: the baseline for bench_allreduce.c.

torch.distributed's gloo all_reduce (SUM, float32) on loopback, ranks as
processes (torch.multiprocessing), rendezvous over tcp://127.0.0.1. Same
sizes, warm-up and iteration rule as bench_allreduce.c, and the same JSON
lines with "backend":"gloo".

Usage: /usr/bin/python3 bench/bench_allreduce_gloo.py [--worlds 2,4]
           [--min-bytes 4096] [--max-bytes 268435456]
"""
import argparse
import json
import os
import socket
import sys
import time

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError:
    sys.exit("bench_allreduce_gloo.py: Debian's PyTorch is missing (python3-torch); "
             "packaging/install-deps.sh --reference installs it")


def iters_for(nbytes):
    # bench_allreduce.c: ~0.5 GB per size, within [5, 1000].
    return max(5, min(1000, (512 << 20) // nbytes))


def sizes(lo, hi):
    n = lo
    while n <= hi:
        yield n
        n *= 4


def rank_main(rank, world, port, lo, hi):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world)
    big = torch.zeros(hi // 4)
    for nbytes in sizes(lo, hi):
        t = big[: nbytes // 4]
        iters = iters_for(nbytes)
        for _ in range(2):
            dist.all_reduce(t)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        dt = torch.tensor([(time.perf_counter() - t0) / iters])
        dist.all_reduce(dt, op=dist.ReduceOp.MAX)  # the slowest rank's time
        worst = dt.item()
        if rank == 0:
            print(json.dumps({"bench": "allreduce", "backend": "gloo", "world": world,
                              "bytes": nbytes, "time_ms": round(worst * 1e3, 4),
                              "algbw_gbps": round(nbytes / worst * 1e-9, 4)},
                             separators=(",", ":")), flush=True)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--min-bytes", type=int, default=4096)
    ap.add_argument("--max-bytes", type=int, default=256 << 20)
    a = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    for world in [int(w) for w in a.worlds.split(",")]:
        mp.spawn(rank_main, args=(world, free_port(), a.min_bytes, a.max_bytes),
                 nprocs=world, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

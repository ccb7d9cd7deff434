"""One rank of test_ranks_under_mpirun_share_in_process_arrays (or the one
process it is compared with): memfit.train on token-id arrays the script
holds, batch and run directory from argv. Rank 0 prints "rank 0 of N".
--bad-on-rank-1: rank 1's arrays hold an id outside the vocabulary (refused
before the engine runs). --tiny-budget-on-rank-1: rank 1's memory= fits
nothing (refused by the engine's plan, after MPI started)."""
import sys

import numpy as np

import memfit

batch, out = int(sys.argv[1]), sys.argv[2]
rng = np.random.default_rng(7)
x = rng.integers(1, 60, size=(320, 12)).astype(np.int64)
x[::4, 8:] = 0  # padding
y = (x[:, 0] % 4).astype(np.int64)
rank = int(__import__("os").environ.get("OMPI_COMM_WORLD_RANK", "0"))
if "--bad-on-rank-1" in sys.argv and rank == 1:
    x[3, 2] = 99
budget = "1MiB" if "--tiny-budget-on-rank-1" in sys.argv and rank == 1 else None
run = memfit.train(model="lstm-classifier", data=(x, y), vocab=60, batch=batch, steps=10, seed=4, threads=1,
                   out=out, progress=False, memory=budget)
if rank == 0:
    print("rank 0 of", run.result.get("ranks", 1))

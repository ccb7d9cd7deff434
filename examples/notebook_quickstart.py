"""memfit in a notebook, cell by cell (each "# %%" is a cell; it also runs as
a script): plan a run inside a budget, train a short one, look at its
history, weights and report.

    make python
    PYTHONPATH=build/python /usr/bin/python3 examples/notebook_quickstart.py
"""
# %% The plan before step one: every byte of the predicted peak, by class.
import memfit

plan = memfit.plan(model="convnet", batch=64, memory="1GiB", optimizer="adamw")
print(plan)  # in a notebook, `plan` alone shows it as a table
print(f"predicted peak {plan.peak_bytes / 2**20:.1f} MiB of {plan.budget_bytes / 2**20:.0f} MiB:",
      "fits" if plan.fits else "over budget", "with", plan.policy)

# %% A budget that is too small says what would fit.
try:
    memfit.plan(model="convnet", batch=64, memory="24MiB")
except memfit.BudgetError as e:
    print("over budget; the smallest budget that fits is memory=%r" % e.memory)

# %% Train a short run (Fashion-MNIST, the default data). Ctrl-C (the
# notebook's interrupt) finishes the step, keeps the checkpoint and raises
# memfit.Interrupted; e.run is the partial run, memfit.train(resume=...)
# continues it.
try:
    run = memfit.train(model="convnet", batch=32, steps=100, subset=2000, test_subset=1000, memory="1GiB",
                       out="runs/quickstart")
except memfit.Interrupted as e:
    run = e.run

# %% What it recorded.
print(run.result)
for row in run.history[-3:]:
    print(row)
try:
    print(run.to_pandas().tail())
except ImportError as e:
    print(e)

# %% The weights under PyTorch names (run.load_into(torch_module) loads them).
for name, w in run.weights().items():
    print(f"{name:24s} {w.shape}")

# %% The report: inline in a notebook (`run.report()` as a cell's value), or its file.
print("report:", run.report().path)

"""Experiment 2: a global-batch sweep from 32 to 4096, with linear scaling alone, with
gradual warm-up, and with LARS (plus no scaling, for reference).

    .venv/bin/python bench/paradigms/batch_sweep.py [--launcher] [--epochs 10]

The task is `synthetic` (8 features, 32768 samples, a ~50k-parameter MLP); every point
trains the same number of epochs, so a larger batch means proportionally fewer steps, the
regime large-batch rules are for. The learning rate was tuned for batch 32 (0.02, momentum
0.9). A point is a global batch B: synchronous SGD over W workers with B/W each computes the
same step as one worker with B, so by default each point runs the training loop in this
process with one worker (no launcher start-up in the budget); `--launcher` runs every
point as a real 2-worker job instead (much slower on a 2-core machine).

Writes bench/results/paradigms/batch_sweep.{md,png}.
"""

from __future__ import annotations

import argparse
import json

from common import curve, figure, home, run_inprocess, run_job, save_figure, write_markdown

BATCHES = [32, 64, 128, 256, 512, 1024, 2048, 4096]
VARIANTS = {
    "no scaling": dict(lr_scaling="none"),
    "linear": dict(lr_scaling="linear"),
    "linear + warm-up": dict(lr_scaling="linear", warmup_epochs=2),
    "LARS + linear + warm-up": dict(lr_scaling="linear", warmup_epochs=2, optimizer="lars",
                                    lars_eta=0.001),
    # The paper's trust coefficient comes with 90-epoch budgets; for 10 epochs its steps are
    # small (lr x eta x ||w|| / ||g||): the same with eta raised tenfold.
    "LARS (eta 0.01) + linear + warm-up": dict(lr_scaling="linear", warmup_epochs=2,
                                               optimizer="lars", lars_eta=0.01),
}
TASK = {"builtin": "synthetic", "synthetic": {"params": 50_000, "samples": 32768, "features": 8}}


def job(batch: int, variant: dict, epochs: float, workers: int) -> dict:
    return dict(name=f"sweep-{batch}", task=TASK, procs_per_node=workers,
                hyper=dict(batch_size=batch // workers, lr=0.02, momentum=0.9, epochs=epochs,
                           reference_batch=32, seed=0, schedule="cosine", **variant),
                checkpoint={"every_steps": 1_000_000}, data={"path": "data"})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launcher", action="store_true", help="each point as a 2-worker job")
    ap.add_argument("--epochs", type=float, default=10)
    args = ap.parse_args()
    root = home("batch_sweep")
    # Points already measured with exactly the same job are reused (rerun after a change).
    cache_file = root / ("points-launcher.json" if args.launcher else "points.json")
    cache = json.loads(cache_file.read_text()) if cache_file.exists() else {}
    acc: dict[str, dict[int, float]] = {v: {} for v in VARIANTS}
    curves: dict[tuple[str, int], list] = {}
    for name, variant in VARIANTS.items():
        for b in BATCHES:
            j = job(b, variant, args.epochs, 2 if args.launcher else 1)
            key = json.dumps(j, sort_keys=True)
            if key not in cache:
                o = run_job(root, j) if args.launcher else run_inprocess(root, j)
                cache[key] = dict(result=o["result"], launch_s=o["launch_s"])
                cache_file.write_text(json.dumps(cache))
            out = cache[key]
            acc[name][b] = out["result"]["test_accuracy"]
            curves[(name, b)] = curve(out)
            print(f"{name:>24}  B={b:<5} accuracy {acc[name][b]:.4f}  "
                  f"({out['result']['steps']} steps, {out['launch_s']:.1f} s)", flush=True)

    reference = acc["no scaling"][32]
    rows = [[b, *(acc[v][b] for v in VARIANTS)] for b in BATCHES]

    def holds_until(v: str, slack: float) -> int | None:
        """Largest batch whose accuracy is within `slack` of the batch-32 reference."""
        ok = [b for b in BATCHES if acc[v][b] >= reference - slack]
        return max(ok) if ok else None

    notes = [f"reference: batch 32, lr 0.02, no scaling: accuracy {reference:.4f}"]
    for v in VARIANTS:
        notes.append(f"{v}: largest batch within 1 point of the reference: "
                     f"{holds_until(v, 0.01)}; within 2 points: {holds_until(v, 0.02)}")
    write_markdown(
        "batch_sweep", "Global-batch sweep: linear scaling, warm-up, LARS",
        f"Final test accuracy after {args.epochs:g} epochs of `synthetic` (8 features, 32768 "
        f"samples, ~50k parameters) per global batch; lr 0.02 at batch 32, momentum 0.9, "
        f"cosine decay after warm-up (2 epochs where used), LARS trust coefficient 0.001 "
        f"(the paper's) or 0.01. "
        f"{'2-worker jobs through the launcher' if args.launcher else 'One process per point (a sync step over W workers with B/W each is the same step as one worker with B)'}.",
        ["global batch", *VARIANTS], rows, notes)

    fig, ax = figure(1, 2, (12, 4.5))
    for v in VARIANTS:
        ax[0][0].plot(BATCHES, [acc[v][b] for b in BATCHES], marker="o", label=v)
    ax[0][0].set(xscale="log", xlabel="global batch", ylabel="test accuracy",
                 title=f"final accuracy after {args.epochs:g} epochs")
    ax[0][0].set_xticks(BATCHES, [str(b) for b in BATCHES])
    ax[0][0].axhline(reference - 0.01, color="grey", ls=":", lw=1)
    ax[0][0].legend()
    for v in VARIANTS:
        c = curves[(v, 4096)]
        ax[0][1].plot([p["epoch"] for p in c], [p["accuracy"] for p in c], marker=".", label=v)
    ax[0][1].set(xlabel="epoch", ylabel="test accuracy", title="learning curves at batch 4096")
    ax[0][1].legend()
    save_figure(fig, "batch_sweep")


if __name__ == "__main__":
    main()

"""Write a built-in task's data set as a directory a job can stage: `python -m alchemist_jobs.data.examples digits DIR`.

The directory holds `train.npz` and `test.npz` (arrays `x`, `y`), the format the built-in
tasks read from `data.source`; push it with `alchemist data push DIR`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def export_digits(dest: Path, seed: int = 0) -> list[Path]:
    """scikit-learn's digits, split and standardised exactly as the built-in `digits` task does."""
    import numpy as np

    from alchemist_jobs.runtime.tasks import _prepare_digits

    d = _prepare_digits(seed)
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for split in ("train", "test"):
        path = dest / f"{split}.npz"
        np.savez(path, x=d[f"x_{split}"].numpy(), y=d[f"y_{split}"].numpy())
        out.append(path)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m alchemist_jobs.data.examples", description=__doc__.splitlines()[0]
    )
    p.add_argument("task", choices=["digits"])
    p.add_argument("dir", type=Path)
    p.add_argument("--seed", type=int, default=0, help="the train/test split's seed")
    args = p.parse_args(argv)
    for path in export_digits(args.dir, args.seed):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Write (or check) the generated monitoring files: dashboards/*.json and rules/*.yaml.

python -m monitoring.generate          regenerate them from the code
python -m monitoring.generate --check  exit 1, naming the files, if they are out of date
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def expected(base: Path = HERE) -> dict[Path, str]:
    from monitoring import dashboards, rules

    files = {base / "dashboards" / name: text for name, text in dashboards.render().items()}
    files[base / "rules" / rules.FILE_NAME] = rules.render()
    return files


def stale(base: Path = HERE) -> list[str]:
    """Generated files whose content differs from what the code generates, or that are missing,
    or that nothing generates any more."""
    want = expected(base)
    out = [str(p.relative_to(base)) for p, text in want.items() if not p.exists() or p.read_text() != text]
    for folder, pattern in (("dashboards", "*.json"), ("rules", "*.yaml")):
        out += [str(p.relative_to(base)) for p in sorted((base / folder).glob(pattern)) if p not in want]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m monitoring.generate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--check", action="store_true", help="only check; exit 1 when out of date")
    args = ap.parse_args(argv)
    if args.check:
        bad = stale()
        if bad:
            print(
                f"out of date with the code: {', '.join(bad)}; run `python -m monitoring.generate`",
                file=sys.stderr,
            )
            return 1
        print("monitoring files are up to date")
        return 0
    want = expected()
    for path, text in want.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path.relative_to(HERE.parent)}")
    for folder, pattern in (("dashboards", "*.json"), ("rules", "*.yaml")):
        for p in (HERE / folder).glob(pattern):
            if p not in want:  # e.g. a renamed dashboard: deployments would still load it
                print(f"warning: nothing generates {p.relative_to(HERE.parent)}; delete it", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Listing a cluster stack at scale: `KubernetesScheduler.list()` over N JobSets (10,000 by
default, each with its two pods) against one, through the client-boundary fake API server
that answers LIST the way the API server does (tests/unit/k8s/fake_kube.py: label
selectors, `limit` and `continue`). What it measures is our side: the requests made and the
client's time (the fake server's time inside each request taken out) to decode the pages and
turn them into statuses, beyond the same for a stack with one run, in the same process. The
API server's own time and the network are not modelled.

The JobSets and pods are copies of a real submitted one (the backend's own manifests).

Usage: python bench/cluster_listing.py [--runs 10000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def stack_with(n: int):
    """(scheduler, fake) with n runs: copies of one submitted digits JobSet and its pods."""
    import alchemist_jobs.kubernetes.client as client
    from alchemist_jobs.kubernetes.scheduler import KubernetesScheduler
    from alchemist_jobs.spec import load_spec
    from tests.k8s_stacks import stack
    from tests.unit.k8s.fake_kube import FakeKube

    fake = FakeKube()
    client.connect = fake.connector
    sched = KubernetesScheduler(stack("dev").output)
    first = "digits-20260101-120000-ab12"
    sched.schedule(sched.dryrun(load_spec(REPO / "examples" / "digits.yaml"),
                                REPO / "examples", run_id=first))
    fake.add_pod(first, 0)
    fake.add_pod(first, 1)
    fake.copy_run(first, [f"digits-20260102-{i:06d}-cd34" for i in range(n - 1)])
    return sched, fake


def timed(sched, fake, repeats: int, what) -> tuple[float, int]:
    """Median seconds of `what` on our side (the fake server's time inside each request is
    taken out), and the requests it made."""
    served = [0.0]
    handle = fake.handle

    def timed_handle(method, kw):
        t0 = time.perf_counter()
        try:
            return handle(method, kw)
        finally:
            served[0] += time.perf_counter() - t0

    fake.handle = timed_handle
    times, calls = [], 0
    for _ in range(repeats):
        fake.calls.clear()
        served[0] = 0.0
        t0 = time.perf_counter()
        what(sched)
        times.append(time.perf_counter() - t0 - served[0])
        calls = len(fake.calls)
    fake.handle = handle
    return statistics.median(times), calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    out = {}
    for label, n in (("one_run", 1), ("many", args.runs)):
        sched, fake = stack_with(n)
        t_list, c_list = timed(sched, fake, args.repeats, lambda s: s.list())
        t_status, c_status = timed(sched, fake, args.repeats,
                                   lambda s: s.status("digits-20260101-120000-ab12"))
        out[label] = dict(runs=n, list_s=round(t_list, 3), list_requests=c_list,
                          status_s=round(t_status, 4), status_requests=c_status)
    out["list_beyond_one_run_s"] = round(out["many"]["list_s"] - out["one_run"]["list_s"], 3)
    out["status_beyond_one_run_s"] = round(out["many"]["status_s"] - out["one_run"]["status_s"], 4)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

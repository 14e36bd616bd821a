"""Listing 10,000 runs through the fake API's paged LISTs (moved from
tests/unit/k8s/test_k8s_scheduler.py: it takes seconds)."""

from __future__ import annotations

from tests.unit.k8s.test_k8s_scheduler import RUN, _submit


def test_list_of_10000_runs_pages_by_label_selector_with_no_request_per_run(fake):
    """Issue 24.1: 10,000 JobSets (copies of a real submitted one, each with its two pods)
    are listed with paged LIST requests (limit and continue, as the API server answers
    them: fake_kube._page) selected by the managed-by label, and not one request per run."""
    import math

    from alchemist_jobs.kubernetes.scheduler import LIST_PAGE

    sched, _ = _submit(fake)
    fake.add_pod(RUN, 0)
    fake.add_pod(RUN, 1)
    n = 10_000
    fake.copy_run(RUN, [f"digits-20260102-{i:06d}-cd34" for i in range(n)])
    fake.calls.clear()
    runs = sched.list()
    assert len(runs) == n + 1 and len({r.run_id for r in runs}) == n + 1
    assert all(r.workers == 2 for r in runs)
    methods = fake.methods()
    assert set(methods) == {"list_namespaced_custom_object", "list_namespaced_pod"}, methods
    assert all(0 < kw["limit"] <= LIST_PAGE for _, kw in fake.calls)
    jobset_pages = [
        kw for m, kw in fake.calls if m == "list_namespaced_custom_object" and kw["plural"] == "jobsets"
    ]
    assert len(jobset_pages) == math.ceil((n + 1) / LIST_PAGE)
    assert all(kw["label_selector"] == "app.kubernetes.io/managed-by=alchemist" for kw in jobset_pages)
    assert len(methods) == math.ceil((n + 1) / LIST_PAGE) + math.ceil(2 * (n + 1) / LIST_PAGE) + 1

"""The tier's own ground: every stack renders, and every job shape it can have yields the backend's objects."""

from __future__ import annotations

import pytest
from conftest import ALL_SHAPES, STACK_NAMES


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_every_stack_has_every_shape_it_can_run(platforms, jobs, stack):
    built = {shape: jobs(stack, shape) for shape in ALL_SHAPES}
    out = platforms[stack].output
    expected_absent = {"gpu"} if not out.gpu.per_node else set()
    if out.object_store is None:
        expected_absent.add("s3-data")
    assert {s for s, j in built.items() if j is None} == expected_absent
    for shape, job in built.items():
        if job is None:
            continue
        kinds = {m["kind"] for m in job.manifests}
        assert ("Pod" if shape == "session" else "JobSet") in kinds, (shape, kinds)
        assert job.pod_templates(), shape

"""Precision defaults: TF32 and bf16 autocast on GPUs unless the spec turns them off, CPU
jobs unchanged. A GPU is named (`cuda:0`) without one: only its compute capability is read."""

from __future__ import annotations

import pytest
import torch

from alchemist_jobs.runtime.precision import Precision, resolve
from alchemist_jobs.spec import JobSpec

GPU, CPU = torch.device("cuda:0"), torch.device("cpu")


def _spec(**precision) -> JobSpec:
    return JobSpec(name="p", task={"builtin": "digits"}, precision=precision)


@pytest.fixture
def capability(monkeypatch):
    def set_cap(cap):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: cap)
    return set_cap


@pytest.fixture
def restore_matmul_flags():
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.get_float32_matmul_precision())
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[:2]
    torch.set_float32_matmul_precision(saved[2])


def test_a_gpu_trains_in_tf32_and_bf16_by_default(capability, restore_matmul_flags):
    capability((9, 0))  # H100/H200
    assert resolve(_spec(), GPU) == ("bf16", True)  # ("none", False) before
    p = Precision(_spec(), GPU)
    assert p.dtype is torch.bfloat16
    assert torch.backends.cuda.matmul.allow_tf32 and torch.get_float32_matmul_precision() == "high"


def test_bf16_is_not_a_default_where_the_gpu_only_emulates_it(capability):
    capability((7, 0))  # V100: no native bfloat16
    assert resolve(_spec(), GPU) == ("none", True)


def test_the_spec_turns_both_off(capability, restore_matmul_flags):
    capability((9, 0))
    off = _spec(tf32=False, autocast="none")
    assert resolve(off, GPU) == ("none", False)
    p = Precision(off, GPU)
    assert p.dtype is None and not torch.backends.cuda.matmul.allow_tf32
    assert torch.get_float32_matmul_precision() == "highest"


def test_cpu_jobs_keep_float32_and_still_take_bf16_when_asked():
    assert resolve(_spec(), CPU) == ("none", False)
    assert resolve(_spec(autocast="bf16"), CPU) == ("bf16", False)


def test_a_bad_value_names_the_field():
    with pytest.raises(ValueError, match="autocast"):
        _spec(autocast="fp8")

"""TensorBoard's SummaryWriter without importing TensorFlow.

`torch.utils.tensorboard` writes event files through `tensorboard.compat.tf`, which imports
TensorFlow whenever it is installed (the `tensorflow` lock section puts it in the same
environment) and only otherwise falls back to TensorBoard's own stub. Importing TensorFlow
took 9 s of rank 0's start on a loaded 2-core machine, while its peers already waited in
the first collective. TensorBoard's documented switch is the module
`tensorboard.compat.notf`: when it can be imported, the stub is used unconditionally
(tensorboard/compat/__init__.py). The stub writes local event files the same way.
"""

from __future__ import annotations

import sys
import types
from typing import Any

_NOTF = "tensorboard.compat.notf"


def summary_writer(log_dir: str) -> Any:
    """A `torch.utils.tensorboard.SummaryWriter` for `log_dir`; TensorFlow stays unimported
    unless the process already uses it (a TensorFlow task's own script)."""
    if "tensorflow" not in sys.modules and _NOTF not in sys.modules:
        sys.modules[_NOTF] = types.ModuleType(_NOTF)
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(log_dir=log_dir)

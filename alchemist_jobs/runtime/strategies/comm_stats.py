"""A process's communication: bytes, rounds, and the seconds a step waited for it.

Every exchange is a span (start, end) on the host clock, or between two CUDA events on a
GPU (collectives return when they are enqueued; only events on the streams that run them
see when the bytes moved). A span is either blocking (the step can do nothing else until it
ends: bmuf's and easgd's all-reduce, a parameter-server round trip) or overlapping (DDP's
bucket all-reduces, issued while backward still computes). Each step's spans make one
window, split when it is read into

- exposed seconds, the time the step waited: all of a blocking span, and of overlapping
  spans only what lies after the last one started (the moment backward had made the last
  bucket's gradients, from which the step has nothing left to do but wait), and
- overlapped seconds, the rest of the time something was in flight (hidden by compute).

The same split is taken on CPU (host clock) and GPU (events), so the contract's
`alchemist_communication_seconds_total` means the same everywhere and matches what the
planner calls exposed communication. A window of events is read only when `settle(block=
True)` asks, which the loop does where it reads the loss anyway (a host sync every 0.5 s):
closing a step never waits for the device.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# (start, end, overlaps): host seconds, or CUDA events; overlaps = issued while compute runs
Span = tuple[Any, Any, bool]
# The tag of a window outside any step (a parameter-server pull before the first step or
# for an evaluation): counted in the totals, not in a step's time split.
OFF_STEP = "off-step"


@dataclass
class CommStats:
    """Running totals of this process's communication; the loop reads them per step.

    Collectives count what a ring all-reduce moves: 2*(n-1)/n times the tensor size in
    each direction, the same accounting for every collective strategy so their traffic
    compares. Parameter-server traffic counts the bytes actually sent and received.
    """

    sent_bytes: float = 0.0
    received_bytes: float = 0.0
    seconds: float = 0.0  # exposed: what the steps waited for, of the windows read so far
    overlapped_seconds: float = 0.0  # in flight while the step computed
    rounds: int = 0
    _open: list[Span] = field(default_factory=list)
    _closed: deque[tuple[Any, list[Span]]] = field(default_factory=deque)  # not yet read

    def allreduce(self, nbytes: int, world: int) -> None:
        moved = 2.0 * (world - 1) / world * nbytes if world > 1 else 0.0
        self.sent_bytes += moved
        self.received_bytes += moved

    def payload(self, sent: int, received: int) -> None:
        """Bytes of a point-to-point exchange (parameter-server traffic), as sent."""
        self.sent_bytes += sent
        self.received_bytes += received

    def window(self, start: float, end: float, overlaps: bool = False) -> None:
        """One exchange in flight from start to end on the host clock (perf_counter)."""
        self._open.append((start, end, overlaps))

    def event_window(self, start: Any, end: Any, overlaps: bool = False) -> None:
        """One exchange on the GPU between two recorded CUDA events."""
        self._open.append((start, end, overlaps))

    def close_window(self, tag: Any = None) -> None:
        """The step is over: its spans become one window, read later by settle(). Never
        waits for the device. `tag` rides along (the loop passes the step's busy seconds)."""
        self._closed.append((tag, self._open))
        self._open = []

    def settle(self, block: bool = False) -> list[tuple[Any, float, float]]:
        """(tag, exposed s, overlapped s) of the closed windows that can be read now, in
        order: host windows always; windows of CUDA events only with block=True, which waits
        for their ends (call it where the host syncs anyway)."""
        out = []
        while self._closed:
            tag, spans = self._closed[0]
            events = any(not isinstance(s[1], float) for s in spans)
            if events and not block:
                break  # later windows wait too: they are read in order
            self._closed.popleft()
            exposed, overlapped = split_spans(_as_numbers(spans) if events else spans)
            self.seconds += exposed
            self.overlapped_seconds += overlapped
            out.append((tag, exposed, overlapped))
        return out

    @contextlib.contextmanager
    def timed(self, device: torch.device | None = None) -> Iterator[None]:
        """Time a blocking exchange: host clock, or CUDA events where `device` is a GPU (the
        block enqueues work that its stream finishes later)."""
        if device is not None and device.type == "cuda":
            import torch

            start = torch.cuda.Event(enable_timing=True)
            start.record()
            try:
                yield
            finally:
                end = torch.cuda.Event(enable_timing=True)
                end.record()
                self.event_window(start, end)
            return
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.window(t0, time.perf_counter())


def _as_numbers(spans: list[Span]) -> list[tuple[float, float, bool]]:
    """Event spans as seconds after the first one's start (starts are recorded in issue
    order on the stream that issues them, so none precedes the first). Waits for them: by
    then they are complete (the loop just read the loss), and elapsed_time needs both."""
    first = spans[0][0]
    out = []
    for start, end, overlaps in spans:
        start.synchronize()
        end.synchronize()
        out.append((first.elapsed_time(start) / 1e3, first.elapsed_time(end) / 1e3, overlaps))
    return out


def split_spans(spans: list[tuple[float, float, bool]]) -> tuple[float, float]:
    """(exposed, overlapped) seconds of one step's spans; see the module docstring."""
    if not spans:
        return 0.0, 0.0
    waited = [(s, e) for s, e, o in spans if not o]
    overlapping = [(s, e) for s, e, o in spans if o]
    if overlapping:
        cut = max(s for s, _ in overlapping)
        waited += [(max(s, cut), e) for s, e in overlapping if e > cut]
    exposed = union_length(waited)
    return exposed, max(0.0, union_length([(s, e) for s, e, _ in spans]) - exposed)


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end] intervals (overlapping exchanges count once)."""
    total, reach = 0.0, None
    for s, e in sorted(intervals):
        if reach is None or s > reach:
            total += max(0.0, e - s)
            reach = e
        elif e > reach:
            total += e - reach
            reach = e
    return total

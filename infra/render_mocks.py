"""What a provider's stand-in for its cloud answers under infra/render.py's mocks (`Provider.render_mocks`)."""

from __future__ import annotations

import hashlib
from typing import Any, Protocol


class RenderMocks(Protocol):
    """A provider's stand-in for its cloud under the mocks (`Provider.render_mocks`)."""

    packages: tuple[str, ...]  # the Pulumi packages it answers for: resource types `<package>:...`
    preload: tuple[str, ...]  # modules its renders import, loaded once before `--jobs` forks

    def new_resource(
        self, t: str, name: str, inputs: dict[str, Any], region: str
    ) -> tuple[str, dict[str, Any]]:
        """(id, outputs) of a resource of one of its packages: the inputs plus what it computes."""
        ...

    def call(self, token: str, args: dict[str, Any], region: str) -> dict[str, Any] | None:
        """A data source's answer, or None when the token is not its own."""
        ...


def fake_id(name: str, prefix: str) -> str:
    """An id shaped like a cloud's (`vpc-0123...`), the same for the same name."""
    return f"{prefix}-{hashlib.sha256(name.encode()).hexdigest()[:17]}"

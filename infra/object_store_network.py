"""How job pods reach the object store: the addresses a platform NetworkPolicy opens to them (a provider's own store: whatever its package puts them behind).

Staging (`data.source: s3://...`) runs in the job pod, and a team namespace denies all egress
but DNS. So each team namespace gets one more platform policy, `alchemist-object-store`
(infra/team_namespace.py), opening TCP to the store's addresses on its port, and nothing
else. A NetworkPolicy matches addresses, never host names, so the store must sit on known
addresses:

- A provider's own store (`Provider.object_store_network`): a cloud's public addresses are
  many and change, so the provider puts the store's endpoints on addresses of the cluster's
  own network and returns them; the policy opens those, not the world (its package says how).
- Elsewhere: the S3-compatible service's endpoint, by address (`objectStore.cidrs`, or the
  endpoint itself when it is an IP address), on the endpoint URL's port.

Nothing here names another run or team: the store's access control (IAM, keys) decides
what a team may read there.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from infra.config import StackConfig, endpoint_address

HTTPS = 443
STORE_POLICY = "alchemist-object-store"


@dataclass(frozen=True)
class StoreEgress:
    """Where job pods may connect to reach the object store: addresses and one TCP port."""

    cidrs: tuple[str, ...]
    port: int


def _endpoint_port(endpoint: str) -> int:
    url = urlsplit(endpoint)
    return url.port or (HTTPS if url.scheme == "https" else 80)


def store_egress(cfg: StackConfig) -> StoreEgress | None:
    """What job pods may reach of the S3-compatible store the config names; None where it names none."""
    store = cfg.object_store
    if store is None or store.endpoint is None:
        return None
    cidrs = tuple(str(c) for c in store.cidrs) or (endpoint_address(store.endpoint),)
    return StoreEgress(cidrs, _endpoint_port(store.endpoint))  # type: ignore[arg-type]

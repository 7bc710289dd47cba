"""The one module that uses Ray's private API: resolving ``address=auto`` (``RAY_ADDRESS``, then the address
``ray start`` recorded) the way ``ray.init`` does, to probe the head before connecting."""

from __future__ import annotations


def bootstrap_address(address: str) -> str:
    """``host:port`` of the cluster's head for an ``address`` as ``ray.init`` takes it (``auto`` included)."""
    from ray._private.services import canonicalize_bootstrap_address_or_die

    return canonicalize_bootstrap_address_or_die(address)

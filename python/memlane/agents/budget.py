"""Old path of :mod:`memlane.agents.request_budget`, kept so existing imports keep working."""

from memlane.agents.request_budget import (
    RequestBudget,
    RequestCount,
    count_request,
)

__all__ = [
    "RequestBudget",
    "RequestCount",
    "count_request",
]

"""Old home of the facts' models and the long-term helpers, re-exported from where they live.

Models: :mod:`memlane.longterm.fact_model`; namespaces: :mod:`memlane.longterm.namespaces`;
argument checks: :mod:`memlane.longterm.value_checks`.
"""

from memlane.longterm.fact_model import (
    Fact,
    FactRevision,
    FactScope,
    FactType,
    RememberResult,
    render_value,
)
from memlane.longterm.namespaces import namespace, parse_namespace
from memlane.longterm.value_checks import check_enum, check_json_value

__all__ = [
    "Fact",
    "FactRevision",
    "FactScope",
    "FactType",
    "RememberResult",
    "check_enum",
    "check_json_value",
    "namespace",
    "parse_namespace",
    "render_value",
]

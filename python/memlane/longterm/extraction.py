"""Old home of fact extraction: :mod:`memlane.longterm.fact_extraction` holds it now."""

from memlane.longterm.fact_extraction import (
    DEFAULT_EXTRACTION_INSTRUCTIONS,
    ExtractedFact,
    FactExtractor,
    create_fact_extractor,
)

__all__ = [
    "DEFAULT_EXTRACTION_INSTRUCTIONS",
    "ExtractedFact",
    "FactExtractor",
    "create_fact_extractor",
]

"""A local embedding model that gives some texts no direction, for the tests of what skips them."""

from __future__ import annotations

from typing import Any

from memlane.embeddings.local import LocalEmbeddingModel


class BlankBlind(LocalEmbeddingModel):
    """The local model, giving texts that hold "blank" no direction (the zero vector)."""

    def encode(self, texts: Any) -> Any:
        rows = super().encode(texts)
        for i, text in enumerate(texts):
            if "blank" in text:
                rows[i] = 0.0
        return rows

"""A turn's entry id has ``uuid.uuid4().hex``'s form: 32 hex digits of a version-4 UUID."""

from __future__ import annotations

import uuid

from memlane.types import new_entry_id


class TestEntryIdsAreUuid4Hex:
    """new_entry_id gives what uuid.uuid4().hex gives: the version and variant bits set."""

    def test_form(self) -> None:
        ids = [new_entry_id() for _ in range(2000)]
        assert len(set(ids)) == len(ids)
        for made in ids:
            parsed = uuid.UUID(hex=made)
            assert parsed.hex == made
            assert parsed.version == 4
            assert parsed.variant == uuid.RFC_4122

    def test_the_random_bits_vary(self) -> None:
        ids = [int(new_entry_id(), 16) for _ in range(2000)]
        fixed = (0xF << 76) | (0x3 << 62)  # the version nibble and the variant's two bits
        varying = 0
        for made in ids:
            varying |= made ^ ids[0]
        assert varying == ((1 << 128) - 1) & ~fixed

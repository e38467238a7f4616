"""Pure-Python twins of every Rust piece: the readable reference, used where the extension is
missing or ``MEMLANE_PURE_PYTHON=1``, and checked against the extension by the tests."""

"""``python -m benches``: see :mod:`benches.run`."""

from benches.run import main

raise SystemExit(main())

"""memlane's benchmarks: side-by-side ratios against what users would pick instead.

``python -m benches`` (or ``python benches/run.py``) runs every workload, writes
``benches/RESULTS.md``, ``benches/results.json`` and the PNG plots, and regenerates the
README's performance section. ``--quick`` is a smoke run; ``--only NAME`` runs one workload
and keeps the stored results of the others. See ``benches/run.py`` for the options.
"""

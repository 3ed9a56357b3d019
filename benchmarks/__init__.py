"""Side-by-side benchmarks of decode-dojo against its peers: `make bench` (python -m benchmarks).

harness.py holds the measuring rules and the Row, groups.py the row groups, report.py the
table, the JSON file and the table in docs/benchmarks.md; the *_bench.py modules do the measuring.
"""

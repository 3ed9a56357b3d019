"""The grading engine: run a kata's hidden suite on one file, in a guarded child, and read the outcomes.

Folded by the process each file runs in. At the top, the grader that decides (grade, child, channel,
outcomes, result, view, machine_lock, freezer); confine/ what confines a submission; judging/ judge
mode's two sides; suite/ what runs inside pytest; scan/ the source scan; proof/ the suite proof.
It knows files and katas only, never notebooks, interviews or the CLI: it imports only the base
(dojo.catalog, dojo.targets, dojo.testing, dojo.source; tests/dojo/test_layers.py). Design notes:
docs/design/grading.md.
"""

"""The grading engine: run a kata's hidden suite on one file, in a guarded child, and read the outcomes.

grade (the run: pristine copies, limits, the outcomes read back), sandbox (bubblewrap), channel (the
plugin's signed records), plugin (pytest's side, in the child), view (what the child may see),
integrity (the AST scan), audit (the audit hook), similarity (submissions alike), inputs (a submission's
files, read and checked), bounded (our functions on a submission's data, in a limited child), judge,
worker, remote and wire (judge mode: the verdict decided outside the candidate's process), mutant and
check_katas (proving the suites fair). It knows files and katas only: never notebooks, interviews, the practice loop or a
terminal. May import: dojo.catalog, dojo.targets, dojo.testing (the base); nothing above.
"""

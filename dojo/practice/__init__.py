"""The practice loop: the workspace copy, the progress database, the check step, the terminal report.

workspace (the learner's copies), history and schema (the SQLite progress database), check (grade,
write results/<slug>.json, record), rerun (--rerun-inconclusive), commands (`dojo list`, `start`,
`check`, `hint` ...), hints (which hint), report, fold and prose (what the terminal shows).
May import: dojo.grading and the base; never interview, notebook, tools or cli.
"""

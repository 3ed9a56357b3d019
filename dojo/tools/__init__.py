"""The commands that run the model: `dojo demo`, `dojo serve`, `dojo roofline`, `dojo bench`; and the tour.

May import: dojo.practice (the console, the workspace), the base (dojo.targets, dojo.catalog) and the
reference solutions; never grading, interview, notebook or cli.
"""

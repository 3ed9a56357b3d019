"""The commands that run the model: `dojo demo`, `dojo roofline`, `dojo bench`.

May import: dojo.practice (the console, the workspace), dojo.targets and the reference solutions;
never grading, interview, notebook or cli.
"""

"""Notebook mode: a kata solved in Jupyter, graded as an extracted .py plus a line map.

extract (.ipynb -> .py and the map back to cells), build (writing the notebooks), grading (grade the
extracted module, name cells instead of lines), display (the report inline), kernel (what the kernel
ran), lab (`dojo lab`), commands (`dojo notebook`, `dojo check --notebook`, `python -m dojo.notebook`).
`grade_here` is re-exported: every kata notebook's grading cell imports it from here.
May import: dojo.practice, dojo.grading and the base; never interview, tools or cli.
"""

from dojo.notebook.grading import grade_here

__all__ = ["grade_here"]

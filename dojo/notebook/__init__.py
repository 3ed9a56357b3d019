"""Notebook mode: a kata solved in Jupyter, graded as an extracted .py plus a line map.

extract (.ipynb -> .py and the map back to cells), build (writing the notebooks), grading (grade
the extracted module with dojo.grading, then name cells instead of lines), display (the report
inline), kernel (which notebook a kernel runs), lab (`dojo lab`), commands (`dojo notebook`,
`dojo check --notebook`, `python -m dojo.notebook`). May import: dojo.practice, dojo.grading and
the base; never interview, tools or cli.

`from dojo.notebook import grade_here` is the grading cell of every notebook a learner already
has: it stays importable from here.
"""

from dojo.notebook.grading import grade_here

__all__ = ["grade_here"]

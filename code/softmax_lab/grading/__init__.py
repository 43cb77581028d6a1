"""Grading learners' notebooks against the solutions with nbval (`softmax-lab grade` / `softmax-lab check`).

* ``chapters``     the chapters (from solutions/), matching a submission to one, grafting its exercise cells
* ``runner``       one grafted notebook under nbval in its own process, scratch directory and limits
* ``nbval_plugin`` the pytest plugin in that process: per-cell results on a private pipe, dead-kernel detection
* ``grader``       cell results -> one gradebook row per exercise (reruns without a hanging/crashing exercise)
* ``report``       gradebook CSV (atomic), resume state, feedback Markdown, manual-grading sheets
* ``nbgrader``     solution notebooks -> nbgrader source notebooks

The command line is in ``softmax_lab.grade``; the instructor's guide is docs/grading.md.
"""

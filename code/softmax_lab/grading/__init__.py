"""Grading learners' notebooks against the solutions with nbval (`softmax-lab grade` / `softmax-lab check`).

* ``grade``        `softmax-lab grade`: options, resume, grade in parallel, write after each notebook
* ``check``        `softmax-lab check`: find the learner's notebook, grade it, print points and FAIL lines
* ``options``      the options both commands share (course, limits, sandbox policy)
* ``gradebook``    the gradebook being written: rows, resume state, and the files beside the CSV (atomic)
* ``cluster``      `grade --dask`: the same grading on a Dask cluster's workers (an executor for ``grade``)
* ``submissions``  the notebooks under the folders given and who handed each in (roster, layouts)
* ``chapters``     the chapters (from solutions/, points from the registry), matching a submission, grafting
* ``grader``       one submission through the named steps below, into one gradebook row per exercise
* ``blanking``     step: run, and rerun without each exercise that hangs, crashes or exhausts memory
* ``runner``       one grafted notebook under nbval in its own sandbox, scratch directory and limits
* ``nbval_plugin`` the pytest plugin in that process (``-p``): per-cell results on a private pipe, dead kernels
* ``statuses``     step: each exercise's status and message from the cells that ran
* ``scoring``      steps: the judge's verdicts, then points, partial credit and the hint cap
* ``judge``        the learner's code relaunched on fresh inputs outside nbval (``judge_harness`` runs inside)
* ``hints``        the hint levels a learner used, and the cap after the complete answer
* ``rows``         the gradebook's row, and learner text made safe for it and for terminals
* ``report``       what the files say: gradebook CSV, feedback Markdown, manual-grading sheets
* ``copies``       the copy check inside `grade`: flags, the instructor's report, points withheld (``similarity``)
* ``results``      per learner and chapter: the points that count, pass/fail by seed 002's rule, the LMS export
* ``merge``        `grade --merge`: hand-graded points and vetoes from the filled sheet, checked whole first
* ``feedback_html`` one learner's feedback as an escaped web page
* ``process``      one process the grader starts: limits, start in a cgroup, its process tree, Ctrl-C
* ``sandbox``      bubblewrap: a fresh sandbox per run (synthetic /etc, uid 1000, size-capped tmpfs folders)
* ``cgroup``       limits the kernel enforces per run: memory (tmpfs included), tasks, CPU; cgroup v2 or v1
* ``streams``      bounded reads: pipes drained with caps, files opened only when they are regular files

Nothing here imports torch (tests/test_layout.py checks it); the judge's harness runs in its own sandbox. The
instructor's guide is docs/grading.md.
"""
import sys

# nbformat validates with jsonschema, which imports rfc3987-syntax when it is installed (Jupyter's own packages
# pull it in); that module builds a grammar for web addresses at import, a second or more of every grading
# process (here and nbval's, whose plugin is loaded after ours). No notebook schema checks web addresses: a None
# entry makes that import fail, which jsonschema expects and handles by skipping those formats.
sys.modules.setdefault("rfc3987_syntax", None)

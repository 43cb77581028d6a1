"""Checks for chapter 5, online softmax: one module per exercise, named after its id (``ch05-long-row`` ->
``long_row.py``), each holding the exercise's cases, its notebook check and the grader's judge.

* ``online_update``: one step of the (m, l) recurrence, in plain Python/torch;
* ``online_kernel``: the learner's online kernel on rows longer than one block, and its traffic;
* ``combine``: merging two (m, l) summaries, in any order and grouping;
* ``long_row``: one long row spread over several programs.

What they share (the -inf start, the recurrence's classic mistakes, a chunk's (max, sum)) is in ``_online.py``.
"""
from .combine import check_combine
from .long_row import check_long_row
from .online_kernel import check_online_softmax, online_problem, traffic_problem
from .online_update import check_online_update, run_online_update

__all__ = ["check_online_update", "check_online_softmax", "check_combine", "check_long_row",
           "online_problem", "traffic_problem", "run_online_update"]

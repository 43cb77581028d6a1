"""Compatibility alias for ``softmax_lab.build`` (issue 10 moved it): the notebook format is
``softmax_lab.course.notebook``, the build ``softmax_lab.course.build``, execution ``softmax_lab.course.execute``.
Kept only for tests/test_checks_ch00_04.py (``build.read``, ``build.learner_notebook``, ``build.tag_value``);
remove once it imports ``softmax_lab.course``.
"""
from .course.build import *  # noqa: F401,F403
from .course.notebook import *  # noqa: F401,F403

"""Checks for chapter 6, half precision and attention: one module per exercise, named after its id
(``ch06-masked`` -> ``masked.py``), each holding the exercise's cases, its notebook check and the grader's judge.

* ``masked``: the masked (causal + left-padding) softmax kernel, one program per row of scores;
* ``attention``: the capstone, attention forward with online softmax, one program per block of queries.
"""
from .attention import check_attention
from .masked import _ulp_problem as _ulp_problem  # chapter 5's fp16 checks use it, and half_sums_in_half
from .masked import check_masked_softmax, half_sums_in_half

__all__ = ["check_masked_softmax", "check_attention", "half_sums_in_half"]

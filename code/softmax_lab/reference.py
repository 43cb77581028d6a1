"""Reference softmaxes in float64, built on torch. Kernels are checked against these.

``softmax_ref`` is the stable one (subtract the row max first). ``softmax_unstable`` and
``softmax_shift_denominator_only`` are deliberately wrong, for teaching: they show what overflow and a
half-done shift do.
"""
import torch


def softmax_ref(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Stable softmax in float64: exp(x - max) / sum(exp(x - max)). Returns float64."""
    x64 = x.detach().to(torch.float64)
    m = x64.amax(dim=dim, keepdim=True)
    # A row that is all -inf has max -inf; -inf - -inf is NaN, as torch.softmax gives.
    e = torch.exp(x64 - m)
    return e / e.sum(dim=dim, keepdim=True)


def softmax_unstable(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Textbook softmax with no max shift, in x's own dtype: exp overflows (fp32 past ~88.72) -> inf/inf = NaN."""
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def softmax_shift_denominator_only(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """A classic bug: shift only the denominator. The result is the true softmax scaled by e^max."""
    m = x.amax(dim=dim, keepdim=True)
    return torch.exp(x) / torch.exp(x - m).sum(dim=dim, keepdim=True)


def masked_softmax_ref(scores: torch.Tensor, mask: torch.Tensor | None = None, dim: int = -1) -> torch.Tensor:
    """Float64 softmax of ``scores`` under an SDPA-style mask; fully masked rows give zeros (not NaN).

    Boolean mask: True = takes part. Any other dtype: added to the scores. Broadcasts like
    ``torch.nn.functional.scaled_dot_product_attention``.
    """
    s = scores.detach().to(torch.float64)
    if mask is not None:
        if mask.dtype == torch.bool:
            s = s.masked_fill(~mask, float("-inf"))
        else:
            s = s + mask.to(torch.float64)
    y = softmax_ref(s, dim=dim)
    all_masked = torch.isneginf(s).all(dim=dim, keepdim=True)
    return torch.where(all_masked, torch.zeros_like(y), y)


def softmax_backward_ref(y: torch.Tensor, dy: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """dx = y * (dy - sum(dy * y)) in float64."""
    y64, dy64 = y.to(torch.float64), dy.to(torch.float64)
    return y64 * (dy64 - (dy64 * y64).sum(dim=dim, keepdim=True))

"""The block-scaled MMA step shared by :mod:`.mx_tile` and :mod:`.mx_decode`."""

from __future__ import annotations

from .._common import HAS_TRITON, tl, triton

if HAS_TRITON:

    @triton.jit
    def mx_dot(acc, a, ea, w, ew, TOKENS_ON_N: tl.constexpr, PROMOTE: tl.constexpr):
        """Block-scaled path: one K tile's ``dot_scaled`` of the activations ``a [BLOCK_T, BLOCK_K]``
        and the weight ``w [BLOCK_D, BLOCK_K]`` with their exponents, into ``acc`` (``[BLOCK_D,
        BLOCK_T]`` with the tokens on the MMA's N side, else ``[BLOCK_T, BLOCK_D]``). ``PROMOTE``:
        the MMA starts from zero and its result is added to ``acc`` in fp32 (``tl.fma(part, 1, acc)``:
        Triton folds a plain ``acc + part`` back into the MMA's accumulator); else the MMA
        accumulates into ``acc`` itself."""
        if TOKENS_ON_N:
            if PROMOTE:
                acc = tl.fma(tl.dot_scaled(w, ew, "e4m3", tl.trans(a), ea, "e4m3"), 1.0, acc)
            else:
                acc = tl.dot_scaled(w, ew, "e4m3", tl.trans(a), ea, "e4m3", acc)
        else:
            if PROMOTE:
                acc = tl.fma(tl.dot_scaled(a, ea, "e4m3", tl.trans(w), ew, "e4m3"), 1.0, acc)
            else:
                acc = tl.dot_scaled(a, ea, "e4m3", tl.trans(w), ew, "e4m3", acc)
        return acc

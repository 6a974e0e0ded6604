"""Block-scale decoding for fp8_einsum's kernels: one definition of what a scale encoding means.
:func:`load_block_scale` decodes a K block's scales to fp32 (the promoting paths: the tile loop
and the decode tile); :func:`load_block_exponents` reads them as the UE8M0 exponent bytes
``tl.dot_scaled`` takes (the block-scaled paths).

Encodings (``KIND``): 0 fp32 scales; 1 packed UE8M0, byte ``kb % 4`` of an int32 word holds K
block ``kb``'s exponent (DeepGEMM's packed layout); 2 one UE8M0 exponent byte per K block (uint8,
or ``float8_e8m0fnu`` viewed as uint8). Exponent e decodes exactly to ``2**(e-127)``, with e = 0
-> 2**-127 and e = 255 -> NaN (the OCP MX spec's E8M0:
https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf).
"""

from __future__ import annotations

from ._common import HAS_TRITON, tl, triton

if HAS_TRITON:

    @triton.jit
    def exp_byte_to_f32(e):
        """UE8M0 exponent byte (int32 0..255) -> fp32 2**(e-127), exact (0 -> 2**-127, 255 -> NaN)."""
        bits = tl.where(e == 0, 0x00400000, e << 23)
        bits = tl.where(e == 255, 0x7FC00000, bits)
        return bits.to(tl.float32, bitcast=True)

    @triton.jit
    def load_block_scale(ptr, offs, kb, mask, KIND: tl.constexpr):
        """K block ``kb``'s scales at ``ptr + offs`` (``offs`` already holds the K-block term:
        ``kb`` for KIND 0 and 2, ``kb // 4`` for KIND 1), decoded to fp32; masked lanes give 1.0."""
        if KIND == 0:
            s = tl.load(ptr + offs, mask=mask, other=1.0)
        elif KIND == 1:
            word = tl.load(ptr + offs, mask=mask, other=127)
            s = exp_byte_to_f32((word >> ((kb % 4) * 8)) & 0xFF)
        else:
            s = exp_byte_to_f32(tl.load(ptr + offs, mask=mask, other=127).to(tl.int32))
        return s

    @triton.jit
    def load_block_exponents(ptr, row_offs, row_mask, kb0, stride_k, KIND: tl.constexpr, NV: tl.constexpr):
        """UE8M0 exponent bytes ``[rows, NV]`` (uint8) of NV consecutive
        32-wide K vectors starting at 128-wide K block ``kb0`` (vector j lies in block
        ``kb0 + j // 4``, so each block's exponent is repeated over its four vectors), at
        ``ptr + row_offs`` (one row offset per tile row, masked rows give exponent 127); and a
        per-row flag, for fp32 scales (KIND 0), that one of them is not a power of two (sign or
        mantissa bits set, but for 2**-127, exponent byte 0): its exponent alone is not the scale.
        """
        kb = kb0 + tl.arange(0, NV) // 4
        if KIND == 1:
            offs = row_offs[:, None] + (kb // 4)[None, :] * stride_k
            word = tl.load(ptr + offs, mask=row_mask[:, None], other=127)
            e = (word >> ((kb % 4) * 8)[None, :]) & 0xFF
            odd = tl.zeros_like(row_offs) != 0
        elif KIND == 2:
            e = tl.load(ptr + row_offs[:, None] + kb[None, :] * stride_k, mask=row_mask[:, None], other=127)
            e = e.to(tl.int32)
            odd = tl.zeros_like(row_offs) != 0
        else:
            s = tl.load(ptr + row_offs[:, None] + kb[None, :] * stride_k, mask=row_mask[:, None], other=1.0)
            bits = s.to(tl.int32, bitcast=True)
            e = (bits >> 23) & 0xFF
            bad = (((bits & 0x7FFFFF) != 0) & (bits != 0x00400000)) | (bits < 0)
            odd = tl.max(bad.to(tl.int32), axis=1) != 0
        return e.to(tl.uint8), odd

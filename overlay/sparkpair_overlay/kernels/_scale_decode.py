"""Block-scale decoding shared by fp8_einsum's Triton kernel (``PATH`` 0-3) and its Gluon tile
(``PATH`` 4 and 5, which call these Triton-language functions from Gluon): one definition of what a
scale encoding means.

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

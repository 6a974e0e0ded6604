"""The ``fp8_einsum`` kernels compute capability family 120 runs (GB10 is 12.1): one file per path.

Every path is ``mma.sync`` on fp8 operands, fp32 accumulation, bf16 output; nothing needs TMA
descriptors, wgmma or another architecture (the overlay routes o_proj to these kernels on family
120 only). Every jitted entry takes the same operand arguments (outputs, operands, sizes, strides;
see :func:`sparkpair_overlay.kernels.fp8_einsum._kernel_args`) and its own ``tl.constexpr`` tile
parameters, so one launcher and one AOT build serve them all.

========================  ===================================  ===================================
path (probe name)         jitted entry                         file
========================  ===================================  ===================================
``tile`` / ``tile-split`` ``_fp8_einsum_tile_kernel``          :mod:`.tile` (K loop, shared-scale check)
``decode``                ``_fp8_einsum_decode_kernel``        :mod:`.decode`
``split-sum``             ``_fp8_einsum_split_sum_kernel``     :mod:`.split_sum`
``mx-tile`` / ``-acc``    ``_fp8_einsum_mx_tile_kernel``       :mod:`.mx_tile`
``mx-decode``             ``_fp8_einsum_mx_decode_kernel``     :mod:`.mx_decode`
========================  ===================================  ===================================

Shared pieces: scale decoding (:mod:`sparkpair_overlay.kernels._scale_decode`), the block-scaled
MMA step (:mod:`._mx`). The configs of each path and the token-count table that picks one:
:mod:`sparkpair_overlay.kernels.fp8_einsum_configs` and
:mod:`sparkpair_overlay.kernels.fp8_einsum_plan`.
"""

from __future__ import annotations

from typing import Any

from .._common import HAS_TRITON
from . import decode, mx_decode, mx_tile, split_sum, tile

__all__ = ["JITTED", "KERNEL_NAMES", "decode", "mx_decode", "mx_tile", "split_sum", "tile"]

#: ``KernelConfig.kernel`` of every path, in the table's order.
KERNEL_NAMES: tuple[str, ...] = (
    tile.KERNEL,
    decode.KERNEL,
    split_sum.KERNEL,
    mx_tile.KERNEL,
    mx_decode.KERNEL,
)

#: The jitted entry of each ``KernelConfig.kernel`` name (empty without Triton).
JITTED: dict[str, Any] = (
    {
        tile.KERNEL: tile._fp8_einsum_tile_kernel,
        decode.KERNEL: decode._fp8_einsum_decode_kernel,
        split_sum.KERNEL: split_sum._fp8_einsum_split_sum_kernel,
        mx_tile.KERNEL: mx_tile._fp8_einsum_mx_tile_kernel,
        mx_decode.KERNEL: mx_decode._fp8_einsum_mx_decode_kernel,
    }
    if HAS_TRITON
    else {}
)

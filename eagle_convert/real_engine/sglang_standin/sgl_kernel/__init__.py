"""Stand-in for ``sgl_kernel`` (the CPU build of SGLang's kernel package): every name SGLang 0.5.23 and 0.5.16 import
from it on their CPU path, each a function that records its name in :data:`CALLS` and raises ``NotImplementedError``.

Only the names listed in :data:`IMPORTED` exist, so a feature probe (``hasattr``, ``from sgl_kernel import x``) of
any other name fails as it would without the package. See ``eagle_convert/real_engine/sglang_standin/__init__.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

__version__ = "0.0.0+eagle-convert-standin"
STANDIN = True  # sglang_worker checks that the sgl_kernel SGLang imports is this one

# the names SGLang 0.5.23's CPU path imports when its modules load (sglang/ = the installed package); 0.5.16 imports
# the same nine (cache_move.py:10, cache_locs.py:25, eagle.py:10, multi_layer_eagle.py:25, allocation.py:46,
# srt/speculative/eagle_utils.py:52-55, eagle_worker_common.py:44, spec_utils.py:84)
IMPORTED = (
    "copy_all_layer_kv_cache_cpu",  # sglang/kernels/ops/kvcache/cache_move.py:10
    "assign_draft_cache_locs_contiguous_cpu",  # sglang/kernels/ops/speculative/cache_locs.py:28-31
    "assign_extend_cache_locs_cpu",  # sglang/kernels/ops/speculative/cache_locs.py:28-31
    "fill_accept_out_cache_loc_cpu",  # sglang/kernels/ops/speculative/eagle.py:10
    "fill_bonus_tokens_cpu",  # sglang/kernels/ops/speculative/eagle.py:10
    "rotate_input_ids_cpu",  # sglang/kernels/ops/speculative/multi_layer_eagle.py:25
    "build_tree_kernel_efficient_cpu",  # sglang/kernels/ops/speculative/spec_tree.py:40-42
    "verify_tree_greedy_cpu",  # sglang/kernels/ops/speculative/spec_tree.py:43
    "assign_req_to_token_pool_cpu",  # sglang/srt/mem_cache/allocation.py:46
)
CALLS: list[str] = []  # the name of every stand-in called, in call order


class StandinCalled(NotImplementedError):
    """A stand-in kernel was called: the run has reached the first step that needs SGLang's CPU kernels."""


def _standin(name: str) -> Callable[..., NoReturn]:
    def kernel(*args: Any, **kwargs: Any) -> NoReturn:
        CALLS.append(name)
        raise StandinCalled(
            f"sgl_kernel.{name} is eagle-convert's stand-in: no CPU kernels on the index (the CPU build of "
            "sgl-kernel is not published), so SGLang runs only up to its loader and aux capture here"
        )

    kernel.__name__ = kernel.__qualname__ = name
    return kernel


globals().update({name: _standin(name) for name in IMPORTED})

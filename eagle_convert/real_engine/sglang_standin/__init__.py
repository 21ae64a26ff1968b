"""Import-only stand-ins for the kernel package SGLang's CPU platform imports, for ``sglang_worker``'s ``load`` mode.

In CPU mode (``SGLANG_USE_CPU_ENGINE=1``) SGLang 0.5.23 imports a few ``*_cpu`` kernels from ``sgl_kernel`` when
its modules are imported (``sglang/kernels/ops/kvcache/cache_move.py:10``, ``sglang/srt/mem_cache/allocation.py:46``,
``sglang/kernels/ops/speculative/eagle.py:10``, ...). They come from the CPU build of ``sgl-kernel``, which the
package index does not carry (``sgl-kernel``/``sglang-kernel`` publish CUDA wheels only, no sdist). The stand-in
``sgl_kernel`` here lets those imports succeed, computes nothing, and raises on any call, recording the call's
name: SGLang's config reading and weight loading, which need no kernel, run as released.

This directory is put on the SGLang child's ``sys.path`` by ``sglang_worker`` alone; it is never installed, and
eagle-convert's own process never imports ``sgl_kernel``.
"""

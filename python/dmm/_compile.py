# SPDX-License-Identifier: Apache-2.0
"""torch.compile under dmm: the modes that capture CUDA graphs fall back to the same compiled code
without them, with one logged sentence.

torch.compile(mode="reduce-overhead") (and "max-autotune") records CUDA graphs through inductor's
graph trees, which checkpoint and restore the caching allocator's private pools
(torch._C._cuda_getCheckpointState / _cuda_setCheckpointPoolState, _cuda_checkPoolLiveAllocations):
calls a pluggable allocator cannot answer (PyTorch raises "does not yet support" for every one, under
dmm as under RMM). dmm.torch.enable() therefore wraps torch.compile: those modes become the mode of the
same kernels without graphs ("reduce-overhead" -> the default, "max-autotune" ->
"max-autotune-no-cudagraphs"), so the outputs are those of the compiled kernels, and the logger "dmm"
says once why and what to do instead (capture with dmm.torch.graph, whose graph memory sleeps, wakes
and is shared). An explicit options={"triton.cudagraphs": True} or backend="cudagraphs" is refused with
the same sentence. Only inductor (the default backend) is steered: another backend gets its arguments
as they are, and mode together with options still meets torch's own refusal.
"""

import functools
import logging

_FALLBACK = {"reduce-overhead": None, "max-autotune": "max-autotune-no-cudagraphs"}
WHY = ("dmm: torch.compile(%s) captures CUDA graphs through inductor's graph trees, which checkpoint "
       "PyTorch's own allocator pools, which a pluggable allocator such as dmm cannot give; the compiled code "
       "runs without CUDA graphs (mode=%r: the same kernels). To replay CUDA graphs under dmm, capture them "
       "with dmm.torch.graph(torch.cuda.CUDAGraph(), pool=...) around the compiled function")
_said = []
_installed = []


def install():
    """Wraps torch.compile once (dmm.torch.enable() calls it)."""
    import torch

    if _installed or not hasattr(torch, "compile"):
        return
    real = torch.compile

    @functools.wraps(real)
    def compile(model=None, *args, **kwargs):
        mode, backend = kwargs.get("mode"), kwargs.get("backend", "inductor")
        options = kwargs.get("options") or {}
        if backend == "cudagraphs":
            raise RuntimeError(WHY % ("backend='cudagraphs'", "default"))  # (nothing compiled)
        if backend == "inductor" and isinstance(options, dict) and options.get("triton.cudagraphs"):
            raise RuntimeError(WHY % ("options={'triton.cudagraphs': True}", "default"))
        if backend == "inductor" and mode in _FALLBACK and not options:  # (mode with options: torch's refusal)
            kwargs["mode"] = _FALLBACK[mode]
            if not _said:
                _said.append(mode)
                logging.getLogger("dmm").warning(WHY, "mode=%r" % mode, _FALLBACK[mode] or "default")
        return real(model, *args, **kwargs) if model is not None else real(*args, **kwargs)

    torch.compile = compile
    _installed.append(real)

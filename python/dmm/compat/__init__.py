# SPDX-License-Identifier: Apache-2.0
"""Drop-ins for the sleep-mode allocators of serving engines: the same names and meanings, over dmm.

    from dmm.compat.vllm import CuMemAllocator                 # for vllm.device_allocator.cumem
    from dmm.compat.torch_memory_saver import torch_memory_saver  # for torch_memory_saver

Both route only the memory allocated inside their regions to dmm (a dmm torch.cuda.MemPool, usable
after CUDA is initialized); sleep copies what must be kept to pinned host memory and unmaps behind an
event recorded after the work already queued, so a kernel still reading the weights finishes first
and no device synchronize happens. docs/torch.md ("vLLM and SGLang drop-ins") has the details.
"""

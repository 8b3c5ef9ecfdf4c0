# SPDX-License-Identifier: Apache-2.0
"""The models of the torch GPU tests, built from configs (no downloads), with fixed seeds."""

import contextlib


def deterministic():
    import torch

    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.enable_flash_sdp(False)  # the math kernels: deterministic forward and backward
    torch.backends.cuda.enable_mem_efficient_sdp(False)
    if hasattr(torch.backends.cuda, "enable_cudnn_sdp"):
        torch.backends.cuda.enable_cudnn_sdp(False)


def llama(scope=None):
    """A Llama-style model (16 layers, hidden 2048, GQA 16/4 heads, ~0.85 B parameters) in bf16 on the
    GPU, built inside `scope` (e.g. dmm.torch.tag("weights")). Returns (model, config, bytes)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=16,
                      num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=1024)
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    try:
        with (scope if scope is not None else contextlib.nullcontext()), torch.device("cuda"):
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(torch.float32)
    model.eval()
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    nbytes += sum(b.numel() * b.element_size() for b in model.buffers())
    return model, cfg, nbytes


def prompt(cfg):
    import torch

    return torch.randint(3, cfg.vocab_size, (4, 32), generator=torch.Generator().manual_seed(2)).cuda()


def generate(model, ids, n=64):
    """Greedy tokens (a list of lists), exactly n new ones per row."""
    import torch

    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                             do_sample=False, pad_token_id=0)
    return out[:, ids.shape[1]:].tolist()

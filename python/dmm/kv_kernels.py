# SPDX-License-Identifier: Apache-2.0
"""dmm.kv_kernels — decode attention over KV arena requests in one launch, for a batch whose rows are
requests at their own addresses and lengths (docs/kv.md, "Graphs: a kernel that stops at each length").

    rows = dmm.kv_kernels.Rows(batch, arena)                # device tensors: each row's base, position, length
    rows.ptrs.copy_(torch.tensor([r.base for r in requests]))
    dmm.kv_kernels.write(k, v, rows, layer, arena)          # this step's K and V at each row's position
    out = dmm.kv_kernels.attention(q, rows, layer, arena)   # [batch, heads, head_dim], float32

A request's tokens lie at base + t × token_bytes, every layer's K and V of a token together (docs/kv.md,
"Layout"), so a batch of requests is no [batch, heads, tokens, dim] tensor: these two Triton kernels take
each row's base address and length from device memory instead. `write` stores one token's K and V per row
at its position; `attention` reads each row's [0, length) only (one query token per row, grouped-query
heads, split over the length with an online softmax, the splits combined after), so it never touches a
granule past a request's tokens, and a CUDA graph captured once over Rows stays valid while requests grow,
close and open (change the tensors' contents, not the tensors). The cost: nothing in memory or driver
calls, against the zero tails' one mapping per granule of every range (DMM_KV_ZERO_TAIL), which serve
kernels that read a fixed length instead (SDPA over a static shape).

Needs Triton (PyTorch's CUDA builds carry it) and bf16 K and V; the head dim and kv_heads × head_dim must be
powers of two (Llama's 128 and 8 × 128 are). A row of length 0 (an idle slot of a captured batch) reads
nothing and gets zeros.
"""

from . import _lib

__all__ = ["Rows", "write", "attention"]

_kernels = {}


def _build():
    """The two kernels, compiled on first use (Triton imported then, so importing this module needs none)."""
    if _kernels:
        return _kernels
    try:
        import triton
        import triton.language as tl
    except ImportError as e:
        raise _lib.DmmError("dmm.kv_kernels needs Triton, which is not importable here (%s): PyTorch's CUDA "
                            "wheels carry it (pip install triton)" % e) from None

    @triton.jit
    def kv_write(k_ptr, v_ptr, rows_ptr, pos_ptr, token_stride, layer_off, KVH_D: tl.constexpr):
        """Row b's K and V of this step ([KVH * D] each) at token pos[b] of the layer at layer_off."""
        b = tl.program_id(0)
        base = tl.load(rows_ptr + b).to(tl.pointer_type(tl.bfloat16))
        pos = tl.load(pos_ptr + b).to(tl.int64)
        i = tl.arange(0, KVH_D)
        dst = base + pos * token_stride + layer_off + i
        tl.store(dst, tl.load(k_ptr + b * KVH_D + i))
        tl.store(dst + KVH_D, tl.load(v_ptr + b * KVH_D + i))

    @triton.jit
    def decode_attention(q_ptr, rows_ptr, len_ptr, o_ptr, lse_ptr, token_stride, layer_off, scale,
                         KVH: tl.constexpr, G: tl.constexpr, D: tl.constexpr, BLOCK_G: tl.constexpr,
                         BLOCK_N: tl.constexpr, CHUNK: tl.constexpr, SPLITS: tl.constexpr):
        """One query token per row, G query heads per KV head h, over tokens [s * CHUNK, min((s+1) * CHUNK,
        len[b])) of row b: partial output and log-sum-exp of split s. Reads nothing past len[b]."""
        b = tl.program_id(0)
        h = tl.program_id(1)
        s = tl.program_id(2)
        base = tl.load(rows_ptr + b).to(tl.pointer_type(tl.bfloat16))
        n = tl.load(len_ptr + b)
        gs = tl.arange(0, BLOCK_G)
        ds = tl.arange(0, D)
        qrow = (b * KVH + h) * G + gs  # query head h * G + g of row b, as transformers' repeat_kv groups them
        q = tl.load(q_ptr + qrow[:, None] * D + ds[None, :], mask=(gs < G)[:, None], other=0.0)
        start = s * CHUNK
        end = tl.minimum(start + CHUNK, n)
        m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_G], tl.float32)
        acc = tl.zeros([BLOCK_G, D], tl.float32)
        koff = layer_off + h * D
        voff = layer_off + KVH * D + h * D
        for t0 in range(start, end, BLOCK_N):
            ts = t0 + tl.arange(0, BLOCK_N)
            tmask = ts < end
            row = ts.to(tl.int64)[:, None] * token_stride
            k = tl.load(base + row + koff + ds[None, :], mask=tmask[:, None], other=0.0)
            v = tl.load(base + row + voff + ds[None, :], mask=tmask[:, None], other=0.0)
            qk = tl.dot(q, tl.trans(k)) * scale
            qk = tl.where(tmask[None, :], qk, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(qk - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(tl.bfloat16), v)
            m_i = m_new
        safe = tl.where(l_i > 0, l_i, 1.0)
        out = acc / safe[:, None]
        lse = tl.where(l_i > 0, m_i + tl.log(safe), float("-inf"))
        gm = gs < G
        tl.store(o_ptr + (qrow[:, None] * SPLITS + s) * D + ds[None, :], out, mask=gm[:, None])
        tl.store(lse_ptr + qrow * SPLITS + s, lse, mask=gm)

    _kernels.update(triton=triton, write=kv_write, attention=decode_attention)
    return _kernels


class Rows:
    """Where each batch row's KV lies (absolute addresses, device int64), where this step's token goes and
    how far each row reaches (device int32), for requests of `arena`'s layout (its ranges, or any memory of
    the same layout): the kernels' inputs, and a captured graph's."""

    def __init__(self, batch, arena):
        torch = _lib.import_torch("dmm.kv_kernels.Rows")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValueError("batch must be an int >= 1, not %r" % (batch,))
        _check(arena, 0, "dmm.kv_kernels.Rows")
        self.ptrs = torch.zeros(batch, dtype=torch.int64, device=arena.device)
        self.pos = torch.zeros(batch, dtype=torch.int32, device=arena.device)   # where this step's token goes
        self.lens = torch.zeros(batch, dtype=torch.int32, device=arena.device)  # tokens to read: pos + 1 in a step
        self.token_elems = arena.token_bytes // 2


def _check(arena, layer, what):
    torch = _lib.import_torch(what)
    if arena.dtype != torch.bfloat16:
        raise ValueError("%s: the kernels read bf16 K and V; this arena holds %s" % (what, arena.dtype))
    D, KVD = arena.head_dim, arena.kv_heads * arena.head_dim
    if D & (D - 1) or KVD & (KVD - 1):
        raise ValueError("%s: the kernels need a head dim and kv_heads x head_dim that are powers of two; this "
                         "arena has %d and %d" % (what, D, KVD))
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < arena.layers:
        raise ValueError("%s: layer must be an int in [0, %d), not %r" % (what, arena.layers, layer))
    return torch


def write(k, v, rows, layer, arena):
    """Stores k and v ([batch, kv_heads, 1, head_dim] or [batch, kv_heads * head_dim], bf16) at token
    rows.pos[b] of layer `layer` of each row (the rows must be backed there)."""
    torch = _check(arena, layer, "dmm.kv_kernels.write")
    KVH, D = arena.kv_heads, arena.head_dim
    B = rows.ptrs.shape[0]
    k = k.reshape(B, KVH * D).to(torch.bfloat16).contiguous()
    v = v.reshape(B, KVH * D).to(torch.bfloat16).contiguous()
    _build()["write"][(B,)](k, v, rows.ptrs, rows.pos, rows.token_elems, layer * 2 * KVH * D, KVH_D=KVH * D)


def attention(q, rows, layer, arena, splits=8, max_tokens=None, scale=None):
    """Attention of one query token per row (q: [batch, heads, head_dim] or [batch, heads, 1, head_dim],
    bf16) over each row's tokens [0, rows.lens[b]) of layer `layer`; returns [batch, heads, head_dim],
    float32. splits programs of max_tokens / splits tokens each (max_tokens: default the arena's; at least
    the longest row, whose tokens past it are not read) cover each row; scale defaults to head_dim ** -0.5."""
    torch = _check(arena, layer, "dmm.kv_kernels.attention")
    KVH, D = arena.kv_heads, arena.head_dim
    B = rows.ptrs.shape[0]
    H = q.shape[1]
    if H % KVH:
        raise ValueError("dmm.kv_kernels.attention: %d query heads are not a multiple of %d KV heads" % (H, KVH))
    k = _build()
    n = max_tokens or arena.max_tokens
    chunk = -(-n // splits // 64) * 64  # a multiple of the kernel's block of 64 tokens
    q = q.reshape(B, H, D).to(torch.bfloat16).contiguous()
    o = torch.empty(B, H, splits, D, dtype=torch.float32, device=q.device)
    lse = torch.empty(B, H, splits, dtype=torch.float32, device=q.device)
    G = H // KVH
    k["attention"][(B, KVH, splits)](q, rows.ptrs, rows.lens, o, lse, rows.token_elems, layer * 2 * KVH * D,
                                     float(scale if scale is not None else D ** -0.5), KVH=KVH, G=G, D=D,
                                     BLOCK_G=max(16, k["triton"].next_power_of_2(G)), BLOCK_N=64, CHUNK=chunk,
                                     SPLITS=splits)
    # an empty split weighs 0, and a row of length 0 (every split empty, its o zeros) comes out as zeros
    w = torch.exp(lse - lse.amax(-1, keepdim=True).clamp_min(-1e30))  # [B, H, S]
    return (o * w[..., None]).sum(-2) / w.sum(-1).clamp_min(1e-30)[..., None]

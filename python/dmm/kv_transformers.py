# SPDX-License-Identifier: Apache-2.0
"""dmm.kv under Hugging Face transformers: a `Cache` whose batch rows are KV arena requests, and the
attention that reads them (docs/kv.md, "transformers").

    arena = dmm.kv.Arena(layers=cfg.num_hidden_layers, kv_heads=cfg.num_key_value_heads,
                         head_dim=cfg.head_dim, dtype=torch.bfloat16, max_tokens=4096)
    dmm.kv_transformers.use(model)                        # attention "dmm_kv" for this model
    cache = dmm.kv_transformers.KVCache(arena, [arena.open() for _ in range(batch)])
    out = model.generate(ids, past_key_values=cache, max_new_tokens=64)

Batch row b is request b: its K and V live in the request's own contiguous range (token-major, every
layer of a token together), which grows granule by granule as tokens arrive and never moves. So no row
is one [batch, heads, tokens, dim] tensor: Cache.update writes the new tokens into each row's range and
returns, for each row, strided views of its K and V over [0, its length); the attention registered as
"dmm_kv" runs PyTorch's scaled_dot_product_attention row by row over those views (grouped-query heads
through enable_gqa, no copy of the cache), with transformers' mask where it made one. A request opened
with a prefix (Arena.share) starts at the prefix's length: pass the whole token ids to generate() and
only the tokens after the prefix are computed.

Rows may have different lengths (a hand-written continuous-batching loop: add_row / drop_row between
steps, each row its own positions): each row attends to its own [0, length), under transformers' mask
cut to that length where there is one (padding, causality; a decode step without a mask needs none).
Rows prefilled together must have one length (a prefill over rows of different lengths is refused).
Full causal attention only: a model that asks for a sliding window, logit soft-capping or attention
sinks is refused. Beam search, crop and reordering are not offered (they raise). torch.compile: the
cache says it is not compileable.
"""

from . import _lib

__all__ = ["KVCache", "attention", "use", "NAME"]

NAME = "dmm_kv"  # the attention implementation's name in transformers' registry


def _transformers():
    try:
        import transformers  # noqa: F401
        from transformers.cache_utils import Cache, CacheLayerMixin
    except ImportError as e:
        raise _lib.DmmError("dmm.kv_transformers needs Hugging Face transformers >= 4.56 (layered caches), which "
                            "is not importable here (%s): pip install transformers" % e) from e
    return Cache, CacheLayerMixin


def _query_length(cache_position, *args, **kwargs):
    """The query length a get_mask_sizes call is about, from transformers' arguments of either form (a
    tensor of positions, or a length)."""
    q = cache_position if cache_position is not None else kwargs.get("query_length", args[0] if args else None)
    if q is None:
        raise TypeError("get_mask_sizes: no query length given")
    return int(q.shape[0]) if hasattr(q, "shape") else int(q)


def _layer_class():
    Cache, CacheLayerMixin = _transformers()

    class _Layer(CacheLayerMixin):
        """One decoder layer's view of the rows: where each row's tokens end for this layer."""

        is_compileable = False
        is_sliding = False

        def __init__(self, owner, index):
            super().__init__()
            self.owner, self.index = owner, index
            self.lengths = list(owner._starts)  # per row: tokens this layer has written (the prefix's first)
            self.is_initialized = True

        def lazy_initialization(self, key_states, *args, **kwargs):
            self.is_initialized = True

        def update(self, key_states, value_states, cache_kwargs=None, *args, **kwargs):
            return self.owner._write(self, key_states, value_states)

        def get_mask_sizes(self, cache_position=None, *args, **kwargs):
            return self.get_seq_length() + _query_length(cache_position, *args, **kwargs), 0

        def get_seq_length(self, *args, **kwargs):
            return max(self.lengths) if self.lengths else 0

        def get_max_cache_shape(self, *args, **kwargs):
            return -1  # grows with its tokens, up to the arena's max_tokens (past it, a DmmError)

        get_max_length = get_max_cache_shape  # (its name in transformers 5)

        def _unsupported(self, *args, **kwargs):
            raise NotImplementedError("dmm.kv_transformers.KVCache: beam search, crop and row reordering are not "
                                      "offered; drop or add rows with drop_row / add_row between steps")

        reorder_cache = crop = batch_repeat_interleave = batch_select_indices = _unsupported

        def reset(self):
            self._unsupported()

    return Cache, _Layer


class _Rows(list):
    """Per row, the [1, kv_heads, length, head_dim] view of K (or V) that attention reads."""


def _cache_class():
    Cache, _Layer = _layer_class()

    class KVCache(Cache):
        """A transformers Cache whose batch rows are dmm.kv requests (see the module's docstring)."""

        def __init__(self, arena, requests):
            import torch

            if not requests:
                raise ValueError("KVCache needs at least one request (one per batch row)")
            self.arena = arena
            self.rows = list(requests)
            self._starts = [r.info()["prefix_tokens"] for r in self.rows]
            self._torch = torch
            super().__init__(layers=[_Layer(self, i) for i in range(arena.layers)])

        def add_row(self, request):
            """A new last batch row (a request just opened, maybe with a prefix)."""
            start = request.info()["prefix_tokens"]
            self.rows.append(request)
            for layer in self.layers:
                layer.lengths.append(start)

        def drop_row(self, b):
            """Removes batch row b (the request stays open: close it when its work is done)."""
            del self.rows[b]
            for layer in self.layers:
                del layer.lengths[b]

        def lengths(self):
            """Tokens each row holds (after the last layer's write)."""
            return list(self.layers[-1].lengths)

        def _write(self, layer, key_states, value_states):
            b_count, _, s, _ = key_states.shape
            if b_count != len(self.rows):
                raise ValueError("KVCache has %d rows, the batch %d: add_row / drop_row to match"
                                 % (len(self.rows), b_count))
            if s > 1 and len(set(layer.lengths)) > 1:
                raise ValueError("KVCache: a prefill of %d tokens over rows of different lengths %s (a prefix "
                                 "on some rows only?): prefill rows of one length together, or one by one"
                                 % (s, layer.lengths))
            keys, values = _Rows(), _Rows()
            for b, r in enumerate(self.rows):
                pos = layer.lengths[b]
                end = pos + s
                if layer.index == 0:
                    r.grow(end)  # one granule per granule-worth of tokens: a no-op in between
                view = r.cache()  # [max_tokens, layers, 2, kv_heads, head_dim]
                view[pos:end, layer.index, 0].copy_(key_states[b].transpose(0, 1))
                view[pos:end, layer.index, 1].copy_(value_states[b].transpose(0, 1))
                layer.lengths[b] = end
                keys.append(view[:end, layer.index, 0].permute(1, 0, 2).unsqueeze(0))
                values.append(view[:end, layer.index, 1].permute(1, 0, 2).unsqueeze(0))
            return keys, values

        @property
        def max_batch_size(self):
            return len(self.rows)

        @property
        def max_cache_len(self):
            return self.arena.max_tokens

    return KVCache


_classes = {}


def KVCache(arena, requests):
    """A transformers Cache over `requests` (dmm.kv.Request, one per batch row) of `arena`."""
    if "cache" not in _classes:
        _classes["cache"] = _cache_class()
    return _classes["cache"](arena, requests)


def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """transformers' attention interface over a KVCache's rows: PyTorch SDPA per row over its own
    [0, length). Returns ([batch, q, heads, head_dim], None), as transformers' sdpa attention does."""
    import torch

    if not isinstance(key, _Rows):
        raise TypeError("dmm.kv_transformers.attention reads a KVCache's rows; this layer got %s: pass "
                        "past_key_values=dmm.kv_transformers.KVCache(...)" % type(key).__name__)
    for name in ("sliding_window", "softcap", "s_aux"):
        if kwargs.get(name) is not None:
            raise NotImplementedError("dmm.kv_transformers.attention: the model asks for %s, which this attention "
                                      "does not apply (full causal attention only): use it with models without "
                                      "sliding windows, logit soft-capping or attention sinks" % name)
    q_len = query.shape[2]
    gqa = query.shape[1] != key[0].shape[1]
    outs = []
    for b, (k, v) in enumerate(zip(key, value)):
        qb = query[b:b + 1]
        mask, causal = None, False
        if attention_mask is not None:  # transformers' mask (padding, causality), over the row's own length
            mask = attention_mask[b:b + 1, :, :, :k.shape[2]]
        elif q_len > 1:  # a prefill without one: causal over the row's own length
            causal = q_len == k.shape[2]
            if not causal:
                raise ValueError("dmm.kv_transformers: a prefill of %d tokens after %d cached needs a mask"
                                 % (q_len, k.shape[2] - q_len))
        outs.append(torch.nn.functional.scaled_dot_product_attention(
            qb, k, v, attn_mask=mask, dropout_p=dropout if module.training else 0.0, is_causal=causal, scale=scaling,
            enable_gqa=gqa))
    return torch.cat(outs, 0).transpose(1, 2).contiguous(), None


def use(model):
    """Registers the "dmm_kv" attention (and transformers' sdpa mask for it) and makes `model` use it."""
    _transformers()
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, attention)
    try:
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

        AttentionMaskInterface.register(NAME, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    except ImportError:  # a transformers whose masks do not go through a registry
        pass
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(NAME)
    else:
        model.config._attn_implementation = NAME
    return model

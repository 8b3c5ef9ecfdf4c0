# SPDX-License-Identifier: Apache-2.0
"""dmm.kv under Hugging Face transformers (python/dmm/kv_transformers.py) on a GPU: a small Llama-style
model (4 layers, GQA 8/2 heads, random float32 weights, from LlamaConfig: no download) generates with
its KV cache in a dmm.kv arena.

What is proven: model.generate with past_key_values=KVCache (attention "dmm_kv": SDPA per row over
each request's range) gives the same greedy tokens as transformers' own DynamicCache with SDPA, for a
batch of 4; a request opened with a prefix (the first 600 tokens of a 700-token prompt, held once in
the arena: its whole granules shared) generates, from the whole token ids, the same tokens as the
prompt without a prefix, and the first forward computed only the 100 tokens after the prefix; a hand-written continuous-batching loop (rows of different
lengths, a row added half-way) gives each row the tokens it gets alone; the arena ends with every
request closed COMPLETE. Prints agreement and timings; exit 0 = all held, 1 = something did not,
77 = no torch/GPU/transformers.
"""

import copy
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import check, failures, require_torch_gpu  # noqa: E402

require_torch_gpu(need_transformers=True)

import torch  # noqa: E402
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM  # noqa: E402

import dmm.kv  # noqa: E402
import dmm.kv_transformers as hf  # noqa: E402
from models import deterministic  # noqa: E402

deterministic()
cfg = LlamaConfig(vocab_size=4096, hidden_size=512, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=8,
                  num_key_value_heads=2, max_position_embeddings=2048, attn_implementation="sdpa")
torch.manual_seed(0)
with torch.device("cuda"):  # a config each: use() sets the attention on the model's config
    ref_model = LlamaForCausalLM(copy.deepcopy(cfg)).eval()
    model = LlamaForCausalLM(copy.deepcopy(cfg)).eval()
model.load_state_dict(ref_model.state_dict())
hf.use(model)
head_dim = cfg.hidden_size // cfg.num_attention_heads
arena = dmm.kv.Arena(layers=cfg.num_hidden_layers, kv_heads=cfg.num_key_value_heads, head_dim=head_dim,
                     dtype=torch.float32, max_tokens=1024, max_requests=16, refill_thread=False)
N = 24


def greedy(m, ids, cache):
    with torch.no_grad():
        out = m.generate(ids, attention_mask=torch.ones_like(ids), past_key_values=cache, max_new_tokens=N,
                         min_new_tokens=N, do_sample=False, pad_token_id=0)
    return out[:, ids.shape[1]:].tolist()


def agree(a, b):
    pairs = [(x, y) for ra, rb in zip(a, b) for x, y in zip(ra, rb)]
    return sum(x == y for x, y in pairs) / max(1, len(pairs))


ids = torch.randint(3, cfg.vocab_size, (4, 64), generator=torch.Generator().manual_seed(1)).cuda()
seen = []  # the query length of every call of the attention (the spy below)


def spy(module, query, *args, **kwargs):
    seen.append(query.shape[2])
    return hf.attention(module, query, *args, **kwargs)


from transformers import AttentionInterface  # noqa: E402

AttentionInterface.register(hf.NAME, spy)
t0 = time.perf_counter()
want = greedy(ref_model, ids, DynamicCache())
t_ref = time.perf_counter() - t0
rows = [arena.open() for _ in range(4)]
cache = hf.KVCache(arena, rows)
t0 = time.perf_counter()
got = greedy(model, ids, cache)
t_dmm = time.perf_counter() - t0
print("generate, batch 4, %d new tokens: DynamicCache %.3f s, KVCache %.3f s; agreement %.4f"
      % (N, t_ref, t_dmm, agree(want, got)))
check(got == want, "model.generate over a KVCache gives DynamicCache's greedy tokens")
check(cache.lengths() == [64 + N - 1] * 4, "each row holds its prompt and the tokens fed back (%s)" % cache.lengths())
for r in rows:
    r.close()

# a prefix held once: the first 600 tokens (a whole 2 MiB granule of 4 KiB tokens and more) of a prompt
P = 600
one = torch.randint(3, cfg.vocab_size, (1, 700), generator=torch.Generator().manual_seed(3)).cuda()
want_one = greedy(ref_model, one, DynamicCache())
sys_req = arena.open()
c0 = hf.KVCache(arena, [sys_req])
with torch.no_grad():
    model(one[:, :P], past_key_values=c0, use_cache=True)  # prefill of the shared part
prefix = arena.share(sys_req, P)
sys_req.close()
r = arena.open(P, prefix=prefix)  # a request holds at least its prefix
cp = hf.KVCache(arena, [r])
check(cp.get_seq_length() == P, "a request opened with the prefix starts at its length (%d)" % cp.get_seq_length())
seen.clear()
got_p = greedy(model, one, cp)
check(got_p == want_one, "generate from a prefix gives the tokens of the whole prompt (agreement %.4f)"
      % agree(want_one, got_p))
check(seen and seen[0] == 700 - P, "only the %d tokens after the prefix were computed (first query: %s)"
      % (700 - P, seen[:1]))
inf = r.info()
print("prefix request: %s" % inf)
check(inf["prefix_tokens"] == P and inf["shared_bytes"] > 0, "the prefix's whole granules are shared, not copied")
r.close()
prefix.release()

# continuous batching by hand: rows of different lengths, one added half-way
prompts = [ids[0, :40], ids[1, :64], ids[2, :17]]
alone = []
for p in prompts:
    alone.append(greedy(ref_model, p[None], DynamicCache())[0])
reqs, cb = [], None
outs = [[] for _ in prompts]
nexts = []
with torch.no_grad():
    for i, p in enumerate(prompts[:2]):  # two rows prefilled one by one, then decoded together
        req = arena.open()
        reqs.append(req)
        if cb is None:
            cb = hf.KVCache(arena, [req])
        else:
            cb.add_row(req)
        solo = hf.KVCache(arena, [req])
        logits = model(p[None], past_key_values=solo, use_cache=True).logits[0, -1]
        for layer, sl in zip(cb.layers, solo.layers):
            layer.lengths[-1] = sl.lengths[0]
        logits[cfg.eos_token_id] = float("-inf")
        nexts.append(int(logits.argmax()))
    for step in range(N):
        if step == 6:  # a third row joins
            req = arena.open()
            reqs.append(req)
            solo = hf.KVCache(arena, [req])
            logits = model(prompts[2][None], past_key_values=solo, use_cache=True).logits[0, -1]
            cb.add_row(req)
            for layer, sl in zip(cb.layers, solo.layers):
                layer.lengths[-1] = sl.lengths[0]
            logits[cfg.eos_token_id] = float("-inf")
            nexts.append(int(logits.argmax()))
        for b, t in enumerate(nexts):
            outs[b].append(t)
        pos = torch.tensor([[n] for n in cb.lengths()], device="cuda")
        tok = torch.tensor([[t] for t in nexts], device="cuda")
        logits = model(tok, position_ids=pos, past_key_values=cb, use_cache=True).logits[:, -1]
        logits[:, cfg.eos_token_id] = float("-inf")  # as generate(min_new_tokens=N) does for the references
        nexts = [int(x) for x in logits.argmax(-1)]
expect = [alone[0][:N], alone[1][:N], alone[2][:N - 6]]
print("continuous batching: agreement per row %s" % [round(agree([e], [o]), 4) for e, o in zip(expect, outs)])
check(all(o == e for o, e in zip(outs, expect)), "each row of a hand-written continuous batch gets its tokens alone")
states = [rq.close() for rq in reqs]
check(states == ["COMPLETE"] * 3, "the batch's requests close COMPLETE (%s)" % states)
st = arena.stats()
check(st["requests"] == 0 and st["prefixes"] == 0, "the arena ends with nothing open (%s)" % st)
arena.close()
print("%d check(s) failed" % len(failures) if failures else "all checks passed")
sys.exit(1 if failures else 0)

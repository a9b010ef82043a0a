"""The world judge's torch modules and their builders (`build_judge`, `judge_from_state`); the
architecture is described in `world_judge.py`. This module imports torch at the top, so only what
builds or loads a judge imports it."""

from __future__ import annotations

import torch
from torch import nn

from cir_demo.models.world_judge import (
    N_TOKENS,
    JudgeArch,
    build_image_encoder,
    feature_dim,
    image_features,
    pooled_stats,
)


class CrossBlock(nn.Module):
    """Probes attend to candidate patch tokens; keys/values depend on the candidate only."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm_q = nn.LayerNorm(width)
        self.q = nn.Linear(width, width)
        self.kv = nn.Linear(width, 2 * width)
        self.out = nn.Linear(width, width)
        self.norm_ff = nn.LayerNorm(width)
        self.ff = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))

    def keys_values(self, cand_tokens):
        return self.kv(cand_tokens).chunk(2, dim=-1)  # (m, P, w) each

    def forward(self, probes, k, v):
        n, p, w = probes.shape
        h = self.heads
        q = self.q(self.norm_q(probes)).view(n, p, h, w // h).transpose(1, 2)
        k = k.view(n, -1, h, w // h).transpose(1, 2)
        v = v.view(n, -1, h, w // h).transpose(1, 2)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        probes = probes + self.out(a.transpose(1, 2).reshape(n, p, w))
        return probes + self.ff(self.norm_ff(probes))


class WorldJudge(nn.Module):
    def __init__(self, arch):
        super().__init__()
        self.arch = arch
        w = arch.width
        self.image = build_image_encoder(arch)
        self.feat_proj = nn.Linear(2 * arch.feat_dim, w)
        self.token_scale = float(feature_dim(arch)) ** 0.5  # unit rows -> O(1) entries
        self.patch_pos = nn.Parameter(torch.randn(N_TOKENS, w) * 0.02)
        self.role = nn.Parameter(torch.randn(4, w) * 0.02)  # reference 1, reference 2, candidate, words
        self.word_emb = nn.Embedding(arch.vocab_size, w, padding_idx=0)
        self.word_pos = nn.Parameter(torch.randn(arch.context_length, w) * 0.02)
        self.probe = nn.Parameter(torch.randn(arch.probes, w) * 0.02)
        layer = nn.TransformerEncoderLayer(
            w, arch.heads, 2 * w, dropout=0.0, batch_first=True, norm_first=True, activation="gelu"
        )
        self.query_encoder = nn.TransformerEncoder(layer, arch.query_layers, enable_nested_tensor=False)
        self.query_norm = nn.LayerNorm(w)
        self.cand_norm = nn.LayerNorm(w)
        self.blocks = nn.ModuleList(CrossBlock(w, arch.heads) for _ in range(arch.cand_layers))
        self.head_norm = nn.LayerNorm(w)
        self.head = nn.Linear(w, 2)  # (logit_yes, logit_no)
        self.near = None
        # The attribute reader: linear heads over an image's pooled patch tokens giving a distribution
        # over each visual property (trained on train-split scene graphs, then frozen). The judge
        # reads these distributions, never a scene graph.
        n_attr_classes = sum(arch.attr_classes)
        self.attr_heads = nn.Linear(4 * arch.feat_dim, n_attr_classes) if n_attr_classes else None
        if n_attr_classes:
            self.attr_proj = nn.Linear(n_attr_classes, w)
            # from the probes: the wanted distribution of each property, and how much each one matters
            self.want = nn.Linear(w, n_attr_classes)
            self.gate = nn.Linear(w, len(arch.attr_classes))
            self.attr_weight = nn.Parameter(torch.tensor(1.0))
            # each property's (start, end) column as ints: reading them from the tensor on every call
            # (two per property) cost a reranking about as much as the softmaxes themselves
            ends = [sum(arch.attr_classes[: a + 1]) for a in range(len(arch.attr_classes))]
            self.attr_columns = list(zip([0] + ends[:-1], ends))
            if arch.near_head:
                d_in = w + 2 + 2 * len(arch.attr_classes)
                self.near = nn.Sequential(
                    nn.LayerNorm(d_in), nn.Linear(d_in, arch.near_head), nn.GELU(), nn.Linear(arch.near_head, 1)
                )
        elif arch.near_head:
            raise ValueError("world judge: a near-miss head needs the attribute reader (attr_classes)")

    # -- image side: once per image
    def patch_features(self, pixels):
        """Normalised (n, 3, 64, 64) -> (n, feature_dim): the cacheable per-image features."""
        return image_features(self.image, pixels)

    def _tokens(self, feats, role: int):
        """(n, feature_dim) unit rows -> (n, N_TOKENS, width)."""
        tokens = feats.view(feats.shape[0], N_TOKENS, -1) * self.token_scale
        return self.feat_proj(tokens) + self.patch_pos + self.role[role]

    def attribute_logits(self, feats):
        """(n, feature_dim) -> (n, sum(attr_classes)) logits of the attribute reader."""
        tokens = feats.view(feats.shape[0], N_TOKENS, -1) * self.token_scale
        return self.attr_heads(pooled_stats(tokens))

    def _per_attribute_softmax(self, logits):
        return torch.cat([torch.softmax(logits[..., lo:hi], dim=-1) for lo, hi in self.attr_columns], dim=-1)

    def attribute_probs(self, feats):
        return self._per_attribute_softmax(self.attribute_logits(feats))

    def _agreement(self, p, q):
        """log of the probability that two property distributions agree, per property: (n, n_props)."""
        joint = p * q
        return torch.log(torch.stack([joint[:, lo:hi].sum(1) for lo, hi in self.attr_columns], dim=1) + 1e-4)

    def _match(self, probes, cand_probs):
        """(weighted sum, per property): log-probability that the candidate shows each wanted property
        value, weighted by how much the query cares about it: ((n,), (n, n_props))."""
        pooled = probes.mean(1)
        want = self._per_attribute_softmax(self.want(pooled))
        per_property = self._agreement(want, cand_probs)
        gate = torch.sigmoid(self.gate(pooled))
        return (gate * per_property).sum(1), per_property

    # -- query side: once per query
    def encode_query(self, ref1, ref2, two_refs, words):
        """ref1/ref2 (q, feature_dim) image features (ref2 anything where `two_refs` is False),
        two_refs (q,) bool, words (q, L) token ids (0 = padding) -> probes (q, P, width)."""
        q = ref1.shape[0]
        n_words = max(1, int((words != 0).sum(1).max())) if len(words) else 1
        words = words[:, :n_words]
        parts = [
            self.probe.expand(q, -1, -1),
            self.word_emb(words) + self.word_pos[:n_words] + self.role[3],
            self._tokens(ref1, 0),
            self._tokens(ref2, 1),
        ]
        p = self.arch.probes
        single = (~two_refs.bool())[:, None]
        masks = [
            torch.zeros(q, p, dtype=torch.bool),
            words == 0,
            torch.zeros(q, N_TOKENS, dtype=torch.bool),
            single.expand(q, N_TOKENS),
        ]
        if self.attr_heads is not None:  # each reference's properties as one more token
            parts += [
                self.attr_proj(self.attribute_probs(ref1))[:, None] + self.role[0],
                self.attr_proj(self.attribute_probs(ref2))[:, None] + self.role[1],
            ]
            masks += [torch.zeros(q, 1, dtype=torch.bool), single]
        x = torch.cat(parts, dim=1)
        pad = torch.cat(masks, dim=1)
        h = self.query_encoder(x, src_key_padding_mask=pad)
        return self.query_norm(h[:, :p])

    # -- candidate side
    def candidate_memory(self, cand_feats):
        """(m, feature_dim) image features -> per block (keys, values), each (m, N_TOKENS, width): once per
        candidate image."""
        t = self.cand_norm(self._tokens(cand_feats, 2))
        memory = [blk.keys_values(t) for blk in self.blocks]
        if self.attr_heads is not None:
            probs = self.attribute_probs(cand_feats)
            memory.append((probs, probs))
        return memory

    def logits(self, probes, memory, cand_index, ref_props=None):
        """probes (n, P, w) of each pair's query, memory from `candidate_memory`, cand_index (n,)
        the row of each pair's candidate in it -> (n, 2) logits (yes, no); with a near-miss head
        and `ref_props` (n, sum(attr_classes)), reference 1's `attribute_probs` of each pair's
        query: (n, 3) logits (yes, no, near)."""
        h = probes
        for blk, (k, v) in zip(self.blocks, memory):
            h = blk(h, k[cand_index], v[cand_index])
        pooled = self.head_norm(h.mean(1))
        logits = self.head(pooled)
        if self.attr_heads is None:
            return logits
        cand_props = memory[-1][0][cand_index]
        match, per_property = self._match(probes, cand_props)
        match = self.attr_weight * match
        logits = logits + torch.stack([match, torch.zeros_like(match)], dim=1)
        if self.near is None or ref_props is None:
            return logits
        margin = logits[:, 0] - logits[:, 1]
        x = torch.cat(
            [pooled, margin[:, None], match[:, None], per_property, self._agreement(ref_props, cand_props)], dim=1
        )
        return torch.cat([logits, self.near(x)], dim=1)

    def forward(self, ref1, ref2, two_refs, words, cand_feats, query_index=None):
        """Training/oracle path: one row per pair (or `query_index` maps pairs to query rows);
        (n, 3) logits with a near-miss head, else (n, 2)."""
        probes = self.encode_query(ref1, ref2, two_refs, words)
        ref_props = self.attribute_probs(ref1) if self.near is not None else None
        if query_index is not None:
            probes = probes[query_index]
            ref_props = ref_props[query_index] if ref_props is not None else None
        memory = self.candidate_memory(cand_feats)
        return self.logits(probes, memory, torch.arange(len(cand_feats)), ref_props)


def build_judge(arch: JudgeArch) -> WorldJudge:
    return WorldJudge(arch)


def judge_from_state(state: dict, arch: JudgeArch) -> WorldJudge:
    model = build_judge(arch)
    model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in state.items()})
    return model.eval()

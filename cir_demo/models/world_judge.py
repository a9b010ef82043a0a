"""The world judge: does this candidate image satisfy this instruction applied to these reference images?

It reads what an MLLM judge reads, pixels and words, and nothing else:
- a small CNN turns each image (64 px, the world models' preprocessing) into an 8 x 8 map of
  `feat_dim` features, pooled to 4 x 4 patch tokens (mean and max of each 2 x 2 cell); a
  candidate's tokens do not depend on the query, so they are computed once per image and cached;
- per query, a transformer reads `probes` learned tokens, the instruction's word tokens and the
  patch tokens of reference 1 and reference 2 (two-image queries read both; a one-image query masks
  the second), jointly, so the words attend to the reference pixels: the probes come out as "what the
  target must look like";
- per candidate, the probes cross-attend to the candidate's patch tokens (`cand_layers` blocks),
  and a linear head gives (logit_yes, logit_no). P(yes) = sigmoid(logit_yes - logit_no), calibrated
  on validation data carved from the world's train split (temperature and bias folded into the head);
- optionally (`near_head` > 0) a third answer, logit_near: "is this a near miss: the target the
  instruction describes with one thing wrong?" (PinPoint's explicit negatives). A small MLP reads
  the probes after cross-attention, the yes/no margin, how well the candidate shows each wanted
  property and how much it looks like reference 1, property by property. Reranking then orders by
  P(yes) - penalty * P(near) (`rerank/world_verifier.py`): a near miss is the costliest wrong answer.

Model definitions only: serving (`rerank/world_verifier.py`) and training (`training/world_judge.py`)
both import this module. torch is imported inside the builders.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

GRID = 8  # the CNN's output map is GRID x GRID for a 64 px input
TOKEN_GRID = 4  # ... pooled to TOKEN_GRID x TOKEN_GRID patch tokens of 2 * feat_dim (mean, max)
N_TOKENS = TOKEN_GRID * TOKEN_GRID


@dataclass(frozen=True)
class JudgeArch:
    image_size: int = 64
    channels: tuple = (24, 32, 48, 64, 64, 96, 96)
    feat_dim: int = 64
    width: int = 96
    heads: int = 4
    query_layers: int = 2
    cand_layers: int = 2
    probes: int = 6
    vocab_size: int = 305
    context_length: int = 48
    near_head: int = 0  # hidden width of the near-miss head; 0: no near-miss answer
    # classes of each visual property the attribute reader predicts from an image's patch tokens
    # (colour, pattern, material, ...; set by the trainer from the train split)
    attr_classes: tuple = ()

    def to_json(self) -> dict:
        d = asdict(self)
        d["channels"] = list(self.channels)
        d["attr_classes"] = list(self.attr_classes)
        return d

    @classmethod
    def from_json(cls, obj: dict) -> "JudgeArch":
        names = {f.name for f in fields(cls)}
        unknown = set(obj) - names
        if unknown:
            raise ValueError(f"world judge architecture: unknown field(s) {sorted(unknown)}")
        obj = dict(obj)
        for key in ("channels", "attr_classes"):
            if key in obj:
                obj[key] = tuple(int(c) for c in obj[key])
        return cls(**obj)


def build_image_encoder(arch: JudgeArch):
    """CNN: normalised (n, 3, 64, 64) -> (n, GRID*GRID, feat_dim) map, row-major."""
    from torch import nn

    c = arch.channels
    # (in, out, stride): 64 -> 32 -> 16 -> 8
    plan = [(3, c[0], 1), (c[0], c[1], 2), (c[1], c[2], 1), (c[2], c[3], 2), (c[3], c[4], 1), (c[4], c[5], 2),
            (c[5], c[6], 1)]

    class PatchCNN(nn.Module):
        def __init__(self):
            super().__init__()
            layers = []
            for cin, cout, stride in plan:
                layers += [nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]
            self.body = nn.Sequential(*layers)
            self.proj = nn.Conv2d(c[6], arch.feat_dim, 1)

        def forward(self, x):
            f = self.proj(self.body(x))  # (n, feat_dim, 8, 8)
            return f.flatten(2).transpose(1, 2).contiguous()

    return PatchCNN()


def pool_tokens(feats):
    """(n, GRID*GRID, d) CNN map -> (n, N_TOKENS, 2d): mean and max over each 2 x 2 cell."""
    import torch

    n, _, d = feats.shape
    f = feats.transpose(1, 2).reshape(n, d, GRID, GRID)
    k = GRID // TOKEN_GRID
    pooled = torch.cat([torch.nn.functional.avg_pool2d(f, k), torch.nn.functional.max_pool2d(f, k)], dim=1)
    return pooled.flatten(2).transpose(1, 2).contiguous()


def pooled_stats(tokens):
    """(n, N_TOKENS, 2d) patch tokens -> (n, 4d): global mean, global max, left-half mean, right-half mean."""
    import torch

    n, t, d2 = tokens.shape
    d = d2 // 2
    side = TOKEN_GRID
    means = tokens[..., :d].reshape(n, side, side, d)
    return torch.cat([means.mean((1, 2)), tokens[..., d:].amax(1), means[:, :, :side // 2].mean((1, 2)),
                      means[:, :, side // 2:].mean((1, 2))], dim=1)


def feature_dim(arch: JudgeArch) -> int:
    """Length of an image's cached feature row: N_TOKENS tokens of 2 * feat_dim, flattened."""
    return N_TOKENS * 2 * arch.feat_dim


def image_features(cnn, pixels):
    """Normalised pixels (n, 3, 64, 64) -> (n, feature_dim) float rows of unit length: the pooled patch
    tokens, flattened and L2-normalised (one scale per image; the judge rescales), so they live in the
    same embedding caches as every retriever's unit-norm image embeddings."""
    import torch

    tokens = pool_tokens(cnn(pixels))
    return torch.nn.functional.normalize(tokens.flatten(1), dim=1)


def build_judge(arch: JudgeArch):
    import torch
    from torch import nn

    n_patch = N_TOKENS

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
        def __init__(self):
            super().__init__()
            self.arch = arch
            w = arch.width
            self.image = build_image_encoder(arch)
            self.feat_proj = nn.Linear(2 * arch.feat_dim, w)
            self.token_scale = float(feature_dim(arch)) ** 0.5  # unit rows -> O(1) entries
            self.patch_pos = nn.Parameter(torch.randn(n_patch, w) * 0.02)
            self.role = nn.Parameter(torch.randn(4, w) * 0.02)  # reference 1, reference 2, candidate, words
            self.word_emb = nn.Embedding(arch.vocab_size, w, padding_idx=0)
            self.word_pos = nn.Parameter(torch.randn(arch.context_length, w) * 0.02)
            self.probe = nn.Parameter(torch.randn(arch.probes, w) * 0.02)
            layer = nn.TransformerEncoderLayer(w, arch.heads, 2 * w, dropout=0.0, batch_first=True, norm_first=True,
                                               activation="gelu")
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
                bounds = torch.tensor([0] + list(arch.attr_classes)).cumsum(0)
                self.register_buffer("attr_bounds", bounds, persistent=False)
                if arch.near_head:
                    d_in = w + 2 + 2 * len(arch.attr_classes)
                    self.near = nn.Sequential(nn.LayerNorm(d_in), nn.Linear(d_in, arch.near_head), nn.GELU(),
                                              nn.Linear(arch.near_head, 1))
            elif arch.near_head:
                raise ValueError("world judge: a near-miss head needs the attribute reader (attr_classes)")

        # -- image side: once per image
        def patch_features(self, pixels):
            """Normalised (n, 3, 64, 64) -> (n, feature_dim): the cacheable per-image features."""
            return image_features(self.image, pixels)

        def _tokens(self, feats, role: int):
            """(n, feature_dim) unit rows -> (n, N_TOKENS, width)."""
            tokens = feats.view(feats.shape[0], n_patch, -1) * self.token_scale
            return self.feat_proj(tokens) + self.patch_pos + self.role[role]

        def attribute_logits(self, feats):
            """(n, feature_dim) -> (n, sum(attr_classes)) logits of the attribute reader."""
            tokens = feats.view(feats.shape[0], n_patch, -1) * self.token_scale
            return self.attr_heads(pooled_stats(tokens))

        def _per_attribute_softmax(self, logits):
            out = []
            for a in range(len(self.arch.attr_classes)):
                lo, hi = int(self.attr_bounds[a]), int(self.attr_bounds[a + 1])
                out.append(torch.softmax(logits[..., lo:hi], dim=-1))
            return torch.cat(out, dim=-1)

        def attribute_probs(self, feats):
            return self._per_attribute_softmax(self.attribute_logits(feats))

        def _agreement(self, p, q):
            """log of the probability that two property distributions agree, per property: (n, n_props)."""
            joint = p * q
            return torch.log(torch.stack([joint[:, int(self.attr_bounds[a]):int(self.attr_bounds[a + 1])].sum(1)
                                          for a in range(len(self.arch.attr_classes))], dim=1) + 1e-4)

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
            parts = [self.probe.expand(q, -1, -1), self.word_emb(words) + self.word_pos[:n_words] + self.role[3],
                     self._tokens(ref1, 0), self._tokens(ref2, 1)]
            p = self.arch.probes
            single = (~two_refs.bool())[:, None]
            masks = [torch.zeros(q, p, dtype=torch.bool), words == 0, torch.zeros(q, n_patch, dtype=torch.bool),
                     single.expand(q, n_patch)]
            if self.attr_heads is not None:  # each reference's properties as one more token
                parts += [self.attr_proj(self.attribute_probs(ref1))[:, None] + self.role[0],
                          self.attr_proj(self.attribute_probs(ref2))[:, None] + self.role[1]]
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
            x = torch.cat([pooled, margin[:, None], match[:, None], per_property,
                           self._agreement(ref_props, cand_props)], dim=1)
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

    return WorldJudge()


def judge_from_state(state: dict, arch: JudgeArch):
    model = build_judge(arch)
    model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in state.items()})
    return model.eval()


def load_tokenizer(path):
    """The judge's word-level tokenizer (a `tokenizers` JSON file; [PAD] = 0)."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


def encode_words(tokenizer, texts, context_length: int):
    """(n, context_length) int64 token ids of texts whose <img1>/<img2> markers are already rendered
    as words; 0 pads, longer texts are cut."""
    import numpy as np

    out = np.zeros((len(texts), context_length), np.int64)
    for i, enc in enumerate(tokenizer.encode_batch(list(texts))):
        ids = enc.ids[:context_length]
        out[i, :len(ids)] = ids
    return out

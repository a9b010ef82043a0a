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
both import this module. torch is imported inside the builders; the judge's torch modules live in
`world_judge_net.py`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

GRID = 8  # the CNN's output map is GRID x GRID for a 64 px input
TOKEN_GRID = 4  # ... pooled to TOKEN_GRID x TOKEN_GRID patch tokens of 2 * feat_dim (mean, max)
N_TOKENS = TOKEN_GRID * TOKEN_GRID
# what an image's feature row is made of (`image_features`); stated in the judge's image spec so stored
# features are read back in this form (indexes/prebuilt ships them as int8 codes + float32 scales)
FEATURES = f"int8 codes per token, {N_TOKENS} float32 scales a row, the row's norm folded into them"


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
    plan = [
        (3, c[0], 1),
        (c[0], c[1], 2),
        (c[1], c[2], 1),
        (c[2], c[3], 2),
        (c[3], c[4], 1),
        (c[4], c[5], 2),
        (c[5], c[6], 1),
    ]

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
    return torch.cat(
        [
            means.mean((1, 2)),
            tokens[..., d:].amax(1),
            means[:, :, : side // 2].mean((1, 2)),
            means[:, :, side // 2 :].mean((1, 2)),
        ],
        dim=1,
    )


def feature_dim(arch: JudgeArch) -> int:
    """Length of an image's cached feature row: N_TOKENS tokens of 2 * feat_dim, flattened."""
    return N_TOKENS * 2 * arch.feat_dim


def quantize_tokens(features):
    """(n, dim) float rows -> (codes int8 (n, dim), scales float32 (n, N_TOKENS)): each of the N_TOKENS
    tokens symmetric int8 (scale = max |token| / 127; a zero token: codes 0, scale 1 before the folding),
    then each row's norm folded into its scales so `dequantize_tokens` gives unit rows again (a zero row stays 0).
    Per-token scales keep a token of small values as precise as a loud one."""
    import numpy as np

    x = np.asarray(features, np.float32)
    if x.ndim != 2 or not x.shape[1] or x.shape[1] % N_TOKENS:
        raise ValueError(f"quantize_tokens: want (n, k * {N_TOKENS}) rows, got shape {x.shape}")
    n, dim = x.shape
    tokens = x.reshape(n, N_TOKENS, dim // N_TOKENS)
    peak = np.abs(tokens).max(axis=2)
    scale = np.where(peak > 0, peak / np.float32(127), np.float32(1)).astype(np.float32)
    codes = np.clip(np.rint(tokens / scale[..., None]), -127, 127).astype(np.int8)
    values = codes.astype(np.float64) * scale[..., None]
    norm = np.sqrt(np.square(values).sum(axis=(1, 2)))
    norm[norm == 0] = 1.0
    return codes.reshape(n, dim), (scale / norm[:, None]).astype(np.float32)


def dequantize_tokens(codes, scales):
    """int8 codes (n, dim) and float32 scales (n, N_TOKENS) -> float32 (n, dim) rows: code * its token's
    scale, one float32 multiply per value (the shipped corpus features and `image_features` agree bit for
    bit)."""
    import numpy as np

    codes = np.asarray(codes)
    scales = np.asarray(scales, np.float32)
    n, dim = codes.shape
    if scales.shape != (n, N_TOKENS) or dim % N_TOKENS:
        raise ValueError(f"dequantize_tokens: codes {codes.shape} and scales {scales.shape} do not match")
    rows = codes.reshape(n, N_TOKENS, dim // N_TOKENS).astype(np.float32) * scales[..., None]
    return rows.reshape(n, dim)


def codes_of_features(rows):
    """The inverse of `dequantize_tokens`: (codes, scales) that give `rows` back bit for bit, for rows
    `image_features` made (a zero token gets scale 1). Raises ValueError for rows not of that form."""
    import numpy as np

    x = np.asarray(rows, np.float32)
    if x.ndim != 2 or not x.shape[1] or x.shape[1] % N_TOKENS:
        raise ValueError(f"codes_of_features: want (n, k * {N_TOKENS}) rows, got shape {x.shape}")
    n, dim = x.shape
    tokens = x.reshape(n, N_TOKENS, dim // N_TOKENS)
    peak = np.abs(tokens).max(axis=2)
    guess = np.where(peak > 0, peak / np.float32(127), np.float32(1)).astype(np.float32)
    codes = np.rint(tokens / guess[..., None])
    if not np.abs(codes).max(initial=0) <= 127:
        raise ValueError("codes_of_features: rows are not int8-per-token features (codes beyond 127)")
    codes = codes.astype(np.int8)
    # the folded scale is within a few float32 steps of max |token| / 127: the one that gives the row back
    scales, found = guess.copy(), np.zeros(guess.shape, bool)
    below = above = guess
    candidates = [guess]
    for _ in range(3):
        below, above = np.nextafter(below, np.float32(0)), np.nextafter(above, np.float32(np.inf))
        candidates += [below, above]
    for cand in candidates:
        hit = ~found & (codes * cand[..., None] == tokens).all(axis=2)
        scales[hit] = cand[hit]
        found |= hit
    if not found.all():
        row, token = np.argwhere(~found)[0]
        raise ValueError(f"codes_of_features: row {row} token {token} is not int8 codes times one scale")
    return codes.reshape(n, dim), scales


def code_planes(codes):
    """int8 codes (n, dim) -> int8 (2, n, N_TOKENS, dim / N_TOKENS / 2), their stored form: every token's
    mean half, then its max half minus its mean half (mod 256, so any codes go back exactly). A cell's
    max is at least its mean, so the second plane holds small values, which compress better."""
    import numpy as np

    codes = np.asarray(codes, np.int8)
    n, dim = codes.shape
    halves = codes.reshape(n, N_TOKENS, 2, dim // N_TOKENS // 2).view(np.uint8)
    planes = np.stack([halves[:, :, 0], halves[:, :, 1] - halves[:, :, 0]])
    return planes.view(np.int8)


def codes_of_planes(planes):
    """The inverse of `code_planes`: (2, n, N_TOKENS, half) -> int8 codes (n, dim)."""
    import numpy as np

    planes = np.asarray(planes, np.int8)
    if planes.ndim != 4 or planes.shape[0] != 2 or planes.shape[2] != N_TOKENS:
        raise ValueError(f"codes_of_planes: want (2, n, {N_TOKENS}, half) int8, got shape {planes.shape}")
    mean, delta = planes.view(np.uint8)
    tokens = np.stack([mean, mean + delta], axis=2).view(np.int8)
    return tokens.reshape(planes.shape[1], -1)


def image_codes(cnn, pixels):
    """Normalised pixels (n, 3, 64, 64) -> `quantize_tokens` of the pooled patch tokens, flattened and
    L2-normalised: the judge's per-image features in their stored form."""
    import torch

    tokens = pool_tokens(cnn(pixels))
    rows = torch.nn.functional.normalize(tokens.flatten(1), dim=1)
    return quantize_tokens(rows.detach().float().cpu().numpy())


def image_features(cnn, pixels):
    """Normalised pixels (n, 3, 64, 64) -> (n, feature_dim) float32 rows of unit length: the pooled patch
    tokens, flattened, L2-normalised (one scale per image; the judge rescales) and quantised per token
    (`quantize_tokens`), so they live in the same embedding caches as every retriever's unit-norm image
    embeddings and the shipped int8 corpus features are exactly what the judge computes."""
    import torch

    return torch.from_numpy(dequantize_tokens(*image_codes(cnn, pixels))).to(pixels.device)


def features_of_images(model, images, preprocess: dict, batch_size: int = 256):
    """(n, feature_dim) float32 image features of PIL images (or uint8 arrays) through the judge `model`:
    the model-input pixels of `preprocess`, then `image_features`, `batch_size` images at a time."""
    import numpy as np
    import torch

    from cir_demo.models.preprocess import normalize_pixels, to_model_pixels

    images = list(images)
    out = np.zeros((len(images), feature_dim(model.arch)), np.float32)
    with torch.inference_mode():
        for s in range(0, len(images), batch_size):
            px = normalize_pixels(to_model_pixels(images[s : s + batch_size], preprocess), preprocess)
            out[s : s + batch_size] = model.patch_features(px).numpy()
    return out


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
        out[i, : len(ids)] = ids
    return out

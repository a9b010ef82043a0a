"""world-CIR's Combiner: a CLIP4Cir-style combiner over frozen world-CLIP features.

query = normalise(a * ref + b * text + MLP([ref1, ref2, text, ref * text]))
where (a, b) come from a small gating head, ref = normalised mean of the references (the same
merge the CLIP recipes use) and ref1/ref2 are the two references (ref2 = ref1 for one-image
queries), so composition queries can take the item from one image and the attribute from the other.
The output lives in the world-CLIP image space, so world-CIR shares the world-CLIP image index.
Trained by cir_demo/training/world_cir.py; served by cir_demo/retrievers/world_cir.py.
"""

from __future__ import annotations

import numpy as np


def build_combiner(dim: int, hidden: int):
    import torch
    from torch import nn

    class Combiner(nn.Module):
        """f(ref1, ref2, text) -> unit query vector in the image space."""

        def __init__(self):
            super().__init__()
            self.dim, self.hidden = dim, hidden
            self.mlp = nn.Sequential(
                nn.Linear(4 * dim, hidden),
                nn.GELU(),
                nn.Dropout(0.1),
                nn.Linear(hidden, hidden),
                nn.GELU(),
                nn.Linear(hidden, dim),
            )
            self.gate = nn.Sequential(nn.Linear(4 * dim, hidden // 4), nn.GELU(), nn.Linear(hidden // 4, 2))

        def forward(self, ref1, ref2, text):
            ref = nn.functional.normalize(ref1 + ref2, dim=-1)
            x = torch.cat([ref1, ref2, text, ref * text], dim=-1)
            ab = self.gate(x)
            out = ab[:, :1] * ref + ab[:, 1:2] * text + self.mlp(x)
            return nn.functional.normalize(out, dim=-1)

    return Combiner()


def combiner_from_state(state: dict):
    """Rebuild a Combiner from its safetensors state (dims read from the weights)."""
    hidden, four_dim = state["mlp.0.weight"].shape
    model = build_combiner(four_dim // 4, hidden)
    model.load_state_dict({k: v.float() for k, v in state.items()})
    return model.eval()


def combine_numpy(model, ref1: np.ndarray, ref2: np.ndarray, text: np.ndarray) -> np.ndarray:
    import torch

    def tensor(a):  # a copy: torch warns on every read-only array (a cached, memory-mapped one), once per process
        return torch.from_numpy(np.array(a, np.float32))

    with torch.inference_mode():
        q = model(tensor(ref1), tensor(ref2), tensor(text))
    return q.numpy().astype(np.float32)

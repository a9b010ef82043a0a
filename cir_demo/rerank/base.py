"""The reranker interface shared by every backend.

A reranker answers, for one query and a list of candidates, "is this candidate
relevant?" as P(yes) = sigmoid(logit_yes - logit_no). Backends that produce a
(logit_yes, logit_no) pair per candidate (a local MLLM, a small cross-encoder)
subclass `LogitPairReranker` and implement only `score_logits`.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from cir_demo.rerank.prompt import PromptTemplate, render_display_text
from cir_demo.utils.specs import spec_hash

# CandidateScore.flag values. A flagged candidate has no usable score and keeps
# its first-stage slot when reranked.
FLAG_TOKENS_MISSING = "tokens_missing"  # the yes/no tokens were not among the returned logprobs
FLAG_ERROR_PREFIX = "error: "  # a request or image failed; never cached (may succeed next time)


@dataclass(frozen=True)
class RerankRequest:
    """One query as the reranker sees it: 1 or 2 reference images (PIL), their ids, the instruction."""

    reference_images: tuple
    reference_ids: tuple[str, ...]
    instruction: str

    def __post_init__(self):
        object.__setattr__(self, "reference_images", tuple(self.reference_images))
        object.__setattr__(self, "reference_ids", tuple(str(r) for r in self.reference_ids))
        if not 1 <= len(self.reference_ids) <= 2:
            raise ValueError(f"RerankRequest needs 1 or 2 reference ids, got {len(self.reference_ids)}")
        if len(self.reference_images) != len(self.reference_ids):
            raise ValueError(
                f"RerankRequest: {len(self.reference_images)} reference images for {len(self.reference_ids)} reference ids"
            )
        if not isinstance(self.instruction, str):
            raise ValueError(f"RerankRequest.instruction must be a string, got {type(self.instruction).__name__}")


@dataclass(frozen=True)
class CandidateScore:
    """A backend's answer for one candidate.

    For a local model `logit_yes`/`logit_no` are raw logits; for an API they are
    log-probabilities (they differ from logits by one shared constant, so
    their difference, and P(yes), is the same).
    """

    candidate_id: str
    p_yes: float | None
    logit_yes: float | None
    logit_no: float | None
    flag: str | None = None
    # P(the candidate is a near miss: the wanted target with one thing wrong), from backends that
    # answer it (the world judge); None elsewhere
    p_near: float | None = None

    @property
    def has_score(self) -> bool:
        return self.p_yes is not None

    @property
    def is_error(self) -> bool:
        return self.flag is not None and self.flag.startswith(FLAG_ERROR_PREFIX)

    def margin(self) -> float | None:
        """log-odds of yes: the sort key (unlike P(yes) it does not saturate at 1.0 in floating point)."""
        if self.logit_yes is not None and self.logit_no is not None:
            return float(self.logit_yes - self.logit_no)
        if self.p_yes is None:
            return None
        if self.p_yes <= 0.0:
            return -math.inf
        if self.p_yes >= 1.0:
            return math.inf
        return math.log(self.p_yes / (1.0 - self.p_yes))

    def sort_key(
        self, near_miss_penalty: float = 0.0, rank_weight: float = 0.0, rank: int = 0
    ) -> tuple[float, float] | None:
        """Reranking key, highest first: (P(yes) - penalty * P(near) - rank_weight * rank, log-odds of yes)
        for a score with a near-miss answer and a penalty, or with a first-stage rank weight (`rank`: its
        0-based first-stage rank), else (log-odds of yes, 0); None for an unscored candidate."""
        margin = self.margin()
        if margin is None:
            return None
        use_near = bool(near_miss_penalty) and self.p_near is not None
        if not use_near and not rank_weight:
            return (margin, 0.0)
        key = self.p_yes - near_miss_penalty * self.p_near if use_near else self.p_yes
        return (key - rank_weight * rank if rank_weight else key, margin)


def sigmoid(x: float) -> float:
    """Numerically stable logistic function."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def scores_from_logits(candidate_ids: Sequence[str], logits: np.ndarray) -> list[CandidateScore]:
    """(n, 2) array of (logit_yes, logit_no), or (n, 3) with logit_near (P(near) = sigmoid(logit_near)),
    -> CandidateScores; a non-finite row is flagged as an error."""
    logits = np.asarray(logits, dtype=np.float64)
    if logits.ndim != 2 or logits.shape[0] != len(candidate_ids) or logits.shape[1] not in (2, 3):
        raise ValueError(
            f"expected logits of shape ({len(candidate_ids)}, 2) or ({len(candidate_ids)}, 3), got {logits.shape}"
        )
    finite = np.isfinite(logits).all(axis=1).tolist()
    out = []
    for cid, row, ok in zip(candidate_ids, logits.tolist(), finite):  # Python floats: exact, and cheap per row
        if not ok:
            out.append(CandidateScore(cid, None, None, None, f"{FLAG_ERROR_PREFIX}non-finite logits {tuple(row)}"))
        else:
            ly, ln = row[0], row[1]
            out.append(CandidateScore(cid, sigmoid(ly - ln), ly, ln, None, sigmoid(row[2]) if len(row) == 3 else None))
    return out


def spec_hash_of(spec: dict) -> str:
    """Stable short hash of a JSON-able spec (key order does not matter): the project's spec hash,
    16 hex digits, nothing excluded."""
    return spec_hash(spec, length=16)


class Reranker(abc.ABC):
    """A pointwise reranker.

    `spec` holds everything that determines the scores (backend, model and a
    fingerprint of its weights, yes/no tokens, the exact prompt template,
    dtype, image resolution, library versions); it is written into results
    files and its hash keys the score cache. Runtime settings that do not
    change scores (batch size, concurrency, timeouts, device) are not in it.
    """

    spec: dict
    # The `rerank` command's flags (argparse names) this backend takes as keywords, passed when set;
    # anything else reaches it through --backend-arg KEY=VALUE
    FLAGS: tuple[str, ...] = ()
    # The reranking key is P(yes) - near_miss_penalty * P(near) - first_stage_rank_weight * first-stage
    # rank for backends that set them (from their manifest, and part of their spec); 0, 0: P(yes) alone
    near_miss_penalty: float = 0.0
    first_stage_rank_weight: float = 0.0
    # Whether `score_batch` may run on several threads at once, each batch's scores the same bits as
    # alone (`rerank_run(lanes=...)`): a CPU model on one torch thread per call, for instance
    parallel_batches: bool = False

    @classmethod
    def weights(cls, **kw) -> list:
        """What this backend, built with keywords `kw`, needs on this machine (`cir_demo.utils.needs`
        items; [] for none). The doctor and `--dry-run` ask it; every backend must answer."""
        raise NotImplementedError(
            f"reranker class {cls.__name__} does not declare the weights it needs: "
            "define the classmethod weights(**kw) (see cir_demo/rerank/base.py)"
        )

    @abc.abstractmethod
    def score(
        self, request: RerankRequest, candidate_ids: Sequence[str], candidate_images: Sequence[Any]
    ) -> list[CandidateScore]:
        """One CandidateScore per candidate, in the given order."""

    def score_batch(
        self, items: Sequence[tuple[RerankRequest, Sequence[str], Sequence[Any]]]
    ) -> list[list[CandidateScore]]:
        """`score` for several queries at once, as (request, candidate_ids, candidate_images)
        triples; one list of scores per triple. Backends that batch across queries override it."""
        return [self.score(request, ids, images) for request, ids, images in items]

    def prepare_batch(self, items: Sequence[tuple[RerankRequest, Sequence[str], Sequence[Any]]]) -> None:
        """Called with `score_batch`'s very items on the caller's thread, batch after batch in their order,
        before that batch is scored (perhaps on a lane of `rerank_run`). A backend whose scores depend on
        what earlier batches left behind (features it keeps) builds that here: lanes then give the bits
        of one lane, whatever order their threads run in. The default does nothing."""

    def needs_image(self, image_id: str) -> bool:
        """False when the backend already holds what it needs of this image (e.g. a precomputed
        embedding), so callers may pass None instead of decoding it."""
        return True

    def spec_hash(self) -> str:
        return spec_hash_of(self.spec)

    @property
    def prompt_template(self) -> PromptTemplate | None:
        p = self.spec.get("prompt")
        return PromptTemplate.from_dict(p) if isinstance(p, dict) else None

    def prompt_text(self, request: RerankRequest) -> str:
        """The prompt this reranker sends for `request`, images shown as `<image: ...>` markers."""
        template = self.prompt_template
        if template is None:
            return "(this reranker uses no text prompt)"
        return render_display_text(
            template, request.instruction, len(request.reference_ids), self.spec["yes_token"], self.spec["no_token"]
        )

    def close(self) -> None:
        """Release resources (threads, GPU memory). The default does nothing."""

    @staticmethod
    def _check_lengths(candidate_ids: Sequence[str], candidate_images: Sequence[Any]) -> None:
        if len(candidate_ids) != len(candidate_images):
            raise ValueError(f"{len(candidate_ids)} candidate ids but {len(candidate_images)} candidate images")

    @classmethod
    def _nothing_to_score(cls, candidate_ids: Sequence[str], candidate_images: Sequence[Any]) -> bool:
        """The start of every `score`: one image per id (else ValueError); True when there are none."""
        cls._check_lengths(candidate_ids, candidate_images)
        return not candidate_ids


class LogitPairReranker(Reranker):
    """Base for backends that compute (logit_yes, logit_no) per candidate."""

    @abc.abstractmethod
    def score_logits(self, request: RerankRequest, candidate_images: Sequence[Any]) -> np.ndarray:
        """An (n, 2) float array: logit_yes, logit_no for each candidate image, in order."""

    def score(
        self, request: RerankRequest, candidate_ids: Sequence[str], candidate_images: Sequence[Any]
    ) -> list[CandidateScore]:
        if self._nothing_to_score(candidate_ids, candidate_images):
            return []
        return scores_from_logits(candidate_ids, self.score_logits(request, candidate_images))

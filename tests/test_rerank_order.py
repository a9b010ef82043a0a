"""rerank() ordering policy and the score cache, with hand-built scores.

`ScriptedReranker` returns scores written in the test (it stands in for no
model outside this file); the oracle is a brute-force restatement of the policy.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path

import pytest

from cir_demo.rerank import (
    FLAG_TOKENS_MISSING,
    CandidateScore,
    Reranker,
    RerankRequest,
    ScoreCache,
    order_top_block,
    rerank,
    rerank_run,
)


class ScriptedReranker(Reranker):
    """Scores from a table {candidate_id: (p_yes, flag)}; counts what it was asked."""

    def __init__(self, table, name="scripted"):
        self.table = table
        self.calls: list[list[str]] = []
        self.spec = {"backend": name, "yes_token": "yes", "no_token": "no"}

    def score(self, request, candidate_ids, candidate_images):
        self._check_lengths(candidate_ids, candidate_images)
        self.calls.append(list(candidate_ids))
        out = []
        for cid, image in zip(candidate_ids, candidate_images):
            assert image == f"img:{cid}"  # the image loaded for this id, in the same order
            p, flag = self.table[cid]
            if p is None:
                out.append(CandidateScore(cid, None, None, None, flag))
            else:
                ly = math.log(p) if p > 0 else -math.inf
                ln = math.log1p(-p) if p < 1 else -math.inf
                out.append(CandidateScore(cid, p, ly, ln, flag))
        return out

    @property
    def n_scored(self):
        return sum(len(c) for c in self.calls)


def load_image(cid):
    return f"img:{cid}"


REQ = RerankRequest(["ref-image"], ["r1"], "make it red")


def oracle_order(ids, table, top_n):
    """Brute force: fill the block's slots left to right; an unscored item keeps
    its slot, otherwise take the best remaining scored item (highest p, then
    earliest first-stage rank)."""
    block, tail = ids[:top_n], ids[top_n:]
    remaining = [c for c in block if table[c][0] is not None]
    out = []
    for c in block:
        if table[c][0] is None:
            out.append(c)
        else:
            best = max(remaining, key=lambda x: (table[x][0], -ids.index(x)))
            remaining.remove(best)
            out.append(best)
    return out + tail


def test_hand_built_case_with_ties_and_flags():
    ids = ["a", "b", "c", "d", "e", "f", "g"]
    table = {
        "a": (0.2, None),
        "b": (0.9, None),
        "c": (None, FLAG_TOKENS_MISSING),  # keeps slot 2
        "d": (0.9, None),  # ties with b: b first (earlier first-stage rank)
        "e": (None, "error: timeout"),  # keeps slot 4
        "f": (0.5, None),
        "g": (0.99, None),  # below top_n: never scored
    }
    rr = ScriptedReranker(table)
    items = rerank(REQ, ids, [7, 6, 5, 4, 3, 2, 1], load_image, rr, top_n=6)
    assert [it.candidate_id for it in items] == ["b", "d", "c", "f", "e", "a", "g"]
    assert rr.calls == [["a", "b", "c", "d", "e", "f"]]
    by_id = {it.candidate_id: it for it in items}
    assert [it.new_rank for it in items] == list(range(7))
    assert by_id["a"].first_stage_rank == 0 and by_id["a"].new_rank == 5 and by_id["a"].rank_change == -5
    assert by_id["d"].first_stage_score == 4.0 and by_id["d"].p_yes == 0.9
    assert by_id["c"].flag == FLAG_TOKENS_MISSING and by_id["c"].p_yes is None and by_id["c"].new_rank == 2
    assert by_id["g"].reranked is False and by_id["g"].p_yes is None and by_id["g"].new_rank == 6
    assert all(it.reranked for it in items[:6])


@pytest.mark.parametrize("seed", range(40))
def test_policy_matches_brute_force_oracle(seed):
    rnd = random.Random(seed)
    n = rnd.randint(0, 12)
    ids = [f"c{i}" for i in range(n)]
    # Few distinct values -> many ties; some unscored.
    table = {
        c: (None, rnd.choice([FLAG_TOKENS_MISSING, "error: x"]))
        if rnd.random() < 0.25
        else (rnd.choice([0.1, 0.5, 0.9]), None)
        for c in ids
    }
    top_n = rnd.choice([0, 1, 3, 5, n, n + 4])
    items = rerank(REQ, ids, None, load_image, ScriptedReranker(table), top_n=top_n)
    assert [it.candidate_id for it in items] == oracle_order(ids, table, top_n)
    assert sorted(it.first_stage_rank for it in items) == list(range(n))


def test_top_n_zero_and_larger_than_list():
    table = {"a": (0.1, None), "b": (0.8, None)}
    rr = ScriptedReranker(table)
    assert [it.candidate_id for it in rerank(REQ, ["a", "b"], None, load_image, rr, top_n=0)] == ["a", "b"]
    assert rr.calls == []
    assert [it.candidate_id for it in rerank(REQ, ["a", "b"], None, load_image, rr, top_n=50)] == ["b", "a"]
    assert rerank(REQ, [], None, load_image, rr, top_n=20) == []


def test_saturated_probabilities_are_ordered_by_logit_margin():
    scores = [
        CandidateScore("x", 1.0, 40.0, 0.0),  # p rounds to 1.0 in float64 for both
        CandidateScore("y", 1.0, 60.0, 0.0),
        CandidateScore("z", 1.0, 40.0, 0.0),  # exact tie with x: first-stage order
    ]
    assert order_top_block(scores) == [1, 0, 2]


def test_bad_inputs_are_rejected():
    rr = ScriptedReranker({"a": (0.5, None)})
    with pytest.raises(ValueError, match="repeat"):
        rerank(REQ, ["a", "a"], None, load_image, rr)
    with pytest.raises(ValueError, match="2 first-stage scores for 1"):
        rerank(REQ, ["a"], [1.0, 2.0], load_image, rr)
    with pytest.raises(ValueError, match="top_n"):
        rerank(REQ, ["a"], None, load_image, rr, top_n=-1)
    with pytest.raises(ValueError, match="1 or 2 reference"):
        RerankRequest([], [], "x")
    with pytest.raises(ValueError, match="2 reference images for 1"):
        RerankRequest(["i", "j"], ["r"], "x")


def test_image_load_failure_flags_only_that_candidate():
    table = {"a": (0.1, None), "b": (0.5, None), "c": (0.9, None)}

    def flaky_load(cid):
        if cid == "b":
            raise OSError("disk gone")
        return load_image(cid)

    rr = ScriptedReranker(table)
    items = rerank(REQ, ["a", "b", "c"], None, flaky_load, rr, top_n=3)
    assert [it.candidate_id for it in items] == ["c", "b", "a"]
    assert items[1].flag.startswith("error: image load failed") and "disk gone" in items[1].flag
    assert rr.calls == [["a", "c"]]


def test_backend_returning_wrong_ids_is_an_error():
    class Wrong(ScriptedReranker):
        def score(self, request, candidate_ids, candidate_images):
            return [CandidateScore("zzz", 0.5, 0.0, 0.0)]

    with pytest.raises(RuntimeError, match="returned scores for"):
        rerank(REQ, ["a"], None, load_image, Wrong({}), top_n=1)


# --------------------------------------------------------------------------- cache
def test_cache_hit_avoids_rescoring_and_persists(tmp_path):
    table = {c: (p, None) for c, p in zip("abcdef", [0.1, 0.2, 0.3, 0.4, 0.5, 0.6])}
    table["c"] = (None, FLAG_TOKENS_MISSING)
    table["d"] = (None, "error: timeout")
    rr = ScriptedReranker(table)
    path = tmp_path / "scores.sqlite"
    with ScoreCache(path) as cache:
        first = rerank(REQ, list("abcdef"), None, load_image, rr, top_n=4, cache=cache)
        assert rr.n_scored == 4 and not any(it.from_cache for it in first)
        second = rerank(REQ, list("abcdef"), None, load_image, rr, top_n=4, cache=cache)
        # a, b, c (tokens_missing is a model answer) come from the cache; the error is retried.
        assert rr.calls[-1] == ["d"] and rr.n_scored == 5
        assert [it.candidate_id for it in second] == [it.candidate_id for it in first]
        assert [it.from_cache for it in second[:4]] == [it.candidate_id != "d" for it in second[:4]]
        # Larger top_n: only the new candidates are scored.
        rerank(REQ, list("abcdef"), None, load_image, rr, top_n=6, cache=cache)
        assert rr.calls[-1] == ["d", "e", "f"]
        assert cache.spec(rr.spec_hash()) == rr.spec
    with ScoreCache(path) as reopened:
        got = reopened.get_many(rr.spec_hash(), REQ.instruction, REQ.reference_ids, list("abcdef"))
        assert sorted(got) == ["a", "b", "c", "e", "f"]
        assert got["c"].flag == FLAG_TOKENS_MISSING and got["c"].p_yes is None
        assert got["b"].p_yes == 0.2 and got["b"].logit_yes == pytest.approx(math.log(0.2))


def test_a_held_cache_answers_as_the_database_does(tmp_path):
    """`hold` serves a spec's scores from memory: every lookup equals the same lookup read from the
    database by a second, unheld connection (the oracle), for rows stored before the hold and after it,
    across queries, references and specs; errors are never held, and the counters agree."""
    table = {c: (0.05 * (i + 1), None) for i, c in enumerate("abcdefgh")}
    table["c"] = (None, FLAG_TOKENS_MISSING)
    table["d"] = (None, "error: timeout")
    rr, other = ScriptedReranker(table), ScriptedReranker(table, name="other-spec")
    requests = [REQ, RerankRequest(["i1", "i2"], ["r1", "r2"], "make it red"), RerankRequest(["x"], ["r2"], "blue")]
    path = tmp_path / "scores.sqlite"
    with ScoreCache(path) as cache, ScoreCache(path) as oracle:
        rerank(REQ, list("abcd"), None, load_image, rr, top_n=4, cache=cache)  # stored before the hold
        rerank(REQ, list("abcd"), None, load_image, other, top_n=4, cache=cache)
        cache.hold(rr.spec_hash())
        rerank(requests[1], list("bcdefg"), None, load_image, rr, top_n=5, cache=cache)  # after it
        rerank(REQ, list("abcdefgh"), None, load_image, rr, top_n=8, cache=cache)
        rerank(requests[2], list("abcdefgh"), None, load_image, other, top_n=3, cache=cache)
        hits, misses = cache.hits, cache.misses
        cache.flush()  # the held spec's rows are written behind: on disk now, for the oracle to read
        asked = 0
        for spec in (rr.spec_hash(), other.spec_hash()):
            for request in requests:
                got = cache.get_many(spec, request.instruction, request.reference_ids, list("abcdefghz"))
                want = oracle.get_many(spec, request.instruction, request.reference_ids, list("abcdefghz"))
                assert got == want and "d" not in got and "z" not in got
                asked += 9
        assert len(cache.get_many(rr.spec_hash(), REQ.instruction, REQ.reference_ids, list("abcdefgh"))) == 7
        assert cache.hits + cache.misses == hits + misses + asked + 8 and cache.hits > hits
        # scores served from memory are flagged as cached, as from the database
        items = rerank(REQ, list("abcdefgh"), None, load_image, rr, top_n=8, cache=cache)
        assert [it.from_cache for it in items] == [it.candidate_id != "d" for it in items]


def test_a_held_cache_writes_every_row_behind_and_close_waits_for_them(tmp_path):
    """Rows of a held spec reach the disk on a thread of their own: reopened after `close`, the database
    holds every row stored, as many as were put (the oracle: the rows counted here), each as given."""
    path = tmp_path / "scores.sqlite"
    put = []
    with ScoreCache(path) as cache:
        cache.hold("h")
        for q in range(40):
            scores = [CandidateScore(f"c{i}", i / 50, 0.1 * q, -0.1 * i, None, None) for i in range(50)]
            assert cache.put_queries("h", [(f"text {q}", [f"r{q}"], scores)]) == 50
            put += [(f"text {q}", f"r{q}", s) for s in scores]
    with ScoreCache(path) as reopened:
        assert len(reopened) == len(put) == 2000
        for text, ref, s in put[::97]:
            assert reopened.get_many("h", text, [ref], [s.candidate_id]) == {s.candidate_id: s}


def test_cache_key_parts_all_matter(tmp_path):
    table = {"a": (0.7, None)}
    with ScoreCache(tmp_path / "s.sqlite") as cache:
        rr = ScriptedReranker(table)
        rerank(REQ, ["a"], None, load_image, rr, top_n=1, cache=cache)
        variants = [
            (ScriptedReranker(table, name="other-spec"), REQ),
            (rr, RerankRequest(["ref-image"], ["r1"], "make it blue")),
            (rr, RerankRequest(["ref-image"], ["r2"], "make it red")),
            (rr, RerankRequest(["i1", "i2"], ["r1", "r2"], "make it red")),
            (rr, RerankRequest(["i1", "i2"], ["r2", "r1"], "make it red")),  # reference order matters
        ]
        for backend, request in variants:
            before = backend.n_scored
            rerank(request, ["a"], None, load_image, backend, top_n=1, cache=cache)
            assert backend.n_scored == before + 1, request
        assert len(cache) == 6


def test_cache_many_ids_and_bad_file(tmp_path):
    ids = [f"id{i}" for i in range(1234)]
    with ScoreCache(tmp_path / "big.sqlite") as cache:
        cache.put_many("h", "q", ["r"], [CandidateScore(c, 0.5, 0.0, 0.0) for c in ids[::2]])
        got = cache.get_many("h", "q", ["r"], ids)
        assert sorted(got) == sorted(ids[::2])
        assert cache.hits == 617 and cache.misses == 617
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is not sqlite" * 100)
    # an optimisation never stops a run: the damaged file is moved aside (kept for inspection)
    with ScoreCache(bad) as cache:
        assert not cache.in_memory and "bad.sqlite was damaged" in cache.warning
        cache.put_many("h", "q", ["r"], [CandidateScore("a", 0.25, 0.0, 0.0)])
        assert cache.get_many("h", "q", ["r"], ["a"])["a"].p_yes == 0.25
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("bad.sqlite.damaged-")]
    assert len(aside) == 1 and aside[0].read_bytes() == b"this is not sqlite" * 100
    # a folder that cannot hold it: scores kept in memory, one warning
    (tmp_path / "blocked").write_text("a file where the folder should be")
    with ScoreCache(tmp_path / "blocked" / "s.sqlite") as cache:
        assert cache.in_memory and "keeping reranker scores in memory" in cache.warning
        cache.put_many("h", "q", ["r"], [CandidateScore("a", 0.5, 0.0, 0.0)])
        assert cache.get_many("h", "q", ["r"], ["a"])["a"].p_yes == 0.5


def _chunk_entries(copies: int = 1):
    """Queries' scores, among them a model answer without a score and an error (never stored)."""
    return [
        (f"{instruction} {k}", refs, scores)
        for k in range(copies)
        for instruction, refs, scores in [
            ("red", ("r1",), [CandidateScore("a", 0.25, -1.0, 0.1, None, 0.5), CandidateScore("b", 0.75, 1.0, 0.0)]),
            ("blue", ("r1", "r2"), [CandidateScore("a", None, None, None, FLAG_TOKENS_MISSING)]),
            ("green", ("r3",), [CandidateScore("c", 0.5, 0.0, 0.0), CandidateScore("d", None, None, None, "error: x")]),
        ]
    ]


def test_a_chunk_of_queries_stores_what_each_query_alone_would(tmp_path):
    """The chunk path against the oracle, one `put_many` per query: the same scores come back."""
    entries = _chunk_entries()
    with ScoreCache(tmp_path / "chunk.sqlite") as chunk, ScoreCache(tmp_path / "each.sqlite") as each:
        assert chunk.put_queries("h", entries) == 4
        assert sum(each.put_many("h", ins, refs, scores) for ins, refs, scores in entries) == 4
        for ins, refs, _ in entries:
            assert chunk.get_many("h", ins, refs, "abcd") == each.get_many("h", ins, refs, "abcd")
        assert len(chunk) == len(each) == 4


def test_a_failed_or_killed_chunk_leaves_none_of_its_scores(tmp_path):
    """A chunk that fails half-way (a value sqlite cannot store) or whose process is killed inside its
    transaction stores nothing of it; what was there before stays, and the file stays readable."""
    import sqlite3
    import subprocess
    import sys
    import textwrap

    path = tmp_path / "scores.sqlite"
    before = CandidateScore("z", 0.5, 0.0, 0.0)
    with ScoreCache(path) as cache:
        cache.put_many("h", "before", ["r"], [before])
        bad = _chunk_entries() + [("x", ("r",), [CandidateScore(object(), 0.5, 0.0, 0.0)])]
        with pytest.raises(sqlite3.ProgrammingError, match="not supported"):
            cache.put_queries("h", bad)
        assert len(cache) == 1 and cache.get_many("h", "before", ["r"], ["z"]) == {"z": before}
    child = textwrap.dedent(f"""
        import os
        from tests.test_rerank_order import ScoreCache, _chunk_entries
        import itertools
        cache = ScoreCache({str(path)!r})
        steps = itertools.count()  # dies a third of the way through the chunk's inserts (200 of ~600 steps)
        cache._db.set_progress_handler(lambda: next(steps) == 200 and os._exit(9), 10)
        cache.put_queries("h", _chunk_entries(copies=40))
    """)
    root = Path(__file__).resolve().parent.parent
    assert subprocess.run([sys.executable, "-c", child], cwd=root).returncode == 9
    with ScoreCache(path) as cache:
        assert cache.warning is None and len(cache) == 1
        assert cache.get_many("h", "before", ["r"], ["z"]) == {"z": before}
        assert cache._db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


# --------------------------------------------------------------------------- whole run
@dataclass
class Q:
    query_id: str
    reference_ids: tuple
    instruction: str


def test_rerank_run_reorders_each_query_and_records_spec(tmp_path):
    table = {"a": (0.1, None), "b": (0.9, None), "c": (0.5, None), "d": (None, FLAG_TOKENS_MISSING)}
    rr = ScriptedReranker(table)
    queries = [Q("q1", ("r1",), "x"), Q("q2", ("r1", "r2"), "y <img2>"), Q("q3", ("r3",), "not in run")]
    run = {"q1": ["a", "b", "c"], "q2": ["d", "c", "b", "a"]}
    with ScoreCache(tmp_path / "c.sqlite") as cache:
        out = rerank_run(queries, run, load_image, rr, top_n=3, cache=cache, progress=False)
        again = rerank_run(queries, run, load_image, rr, top_n=3, cache=cache, progress=False)
    assert out.run == {"q1": ["b", "c", "a"], "q2": ["d", "b", "c", "a"]}
    assert again.run == out.run and again.stats["from_cache"] == 6
    assert out.stats["candidates_scored"] == 6 and out.stats["tokens_missing"] == 1 and out.stats["errors"] == 0
    d = out.to_dict()
    assert d["reranker"]["spec"] == rr.spec and d["reranker"]["top_n"] == 3
    assert d["items"]["q2"][0]["flag"] == FLAG_TOKENS_MISSING


class NearMissReranker(ScriptedReranker):
    """Scores from {candidate_id: (p_yes, p_near)}; ranks by P(yes) - penalty * P(near)."""

    def __init__(self, table, penalty, rank_weight=0.0):
        super().__init__({c: (p, None) for c, (p, _) in table.items()}, name="near")
        self.near = {c: pn for c, (_, pn) in table.items()}
        self.near_miss_penalty = penalty
        self.first_stage_rank_weight = rank_weight
        self.spec = {**self.spec, "near_miss_penalty": penalty, "first_stage_rank_weight": rank_weight}

    def score(self, request, candidate_ids, candidate_images):
        return [
            CandidateScore(s.candidate_id, s.p_yes, s.logit_yes, s.logit_no, s.flag, self.near[s.candidate_id])
            for s in super().score(request, candidate_ids, candidate_images)
        ]


def test_near_miss_penalty_hand_built_case_with_ties():
    # keys with penalty 0.5 (binary fractions: exact): a 0.625, b 0.0625 - 0.4375 = -0.375, c 0.25,
    # d 0.375 - 0.125 = 0.25, e 0.03125 - 0.4375 = -0.40625, f 0.75 - 0.5 = 0.25; g unscored keeps its slot
    table = {
        "a": (0.625, 0.0),
        "b": (0.0625, 0.875),
        "c": (0.25, 0.0),
        "d": (0.375, 0.25),
        "e": (0.03125, 0.875),
        "f": (0.75, 1.0),
        "g": (None, None),
    }
    ids = ["b", "c", "g", "d", "e", "f", "a"]
    rr = NearMissReranker(table, 0.5)
    rr.table["g"] = (None, "error: timeout")
    items = rerank(REQ, ids, None, load_image, rr, top_n=7)
    # by hand: a (0.625); then c, d, f tie at 0.25 -> log-odds of yes breaks it: f > d > c
    assert [it.candidate_id for it in items] == ["a", "f", "g", "d", "c", "b", "e"]
    assert {it.candidate_id: it.p_near for it in items}["b"] == 0.875
    # without the penalty the same scores order by P(yes) alone
    plain = rerank(REQ, ids, None, load_image, NearMissReranker(table | {"g": (0.01, 0.0)}, 0.0), top_n=7)
    assert [it.candidate_id for it in plain] == ["f", "a", "d", "c", "b", "e", "g"]


@pytest.mark.parametrize("seed", range(20))
def test_near_miss_penalty_matches_brute_force(seed):
    rnd = random.Random(seed)
    n = rnd.randint(1, 10)
    ids = [f"c{i}" for i in range(n)]
    table = {c: (rnd.choice([0.1, 0.5, 0.9]), rnd.choice([0.0, 0.5, 1.0])) for c in ids}
    penalty = rnd.choice([0.25, 1.0, 2.0])
    items = rerank(REQ, ids, None, load_image, NearMissReranker(table, penalty), top_n=n)
    # brute force: highest key first; equal keys by P(yes) (monotone in log-odds), then first-stage rank
    expect = sorted(ids, key=lambda c: (-(table[c][0] - penalty * table[c][1]), -table[c][0], ids.index(c)))
    assert [it.candidate_id for it in items] == expect


@pytest.mark.parametrize("seed", range(20))
def test_first_stage_rank_weight_matches_brute_force(seed):
    """Key P(yes) - penalty * P(near) - w * first-stage rank over a longer ranking (only the top n move,
    one unscored candidate keeps its slot), by a naive loop over the key's definition."""
    rnd = random.Random(seed)
    n = rnd.randint(2, 12)
    ids = [f"c{i}" for i in range(n + 3)]
    table = {c: (rnd.choice([0.125, 0.5, 0.875]), rnd.choice([0.0, 0.5, 1.0])) for c in ids}
    penalty, weight = rnd.choice([0.0, 0.25, 1.0]), rnd.choice([0.0625, 0.125, 0.5])
    hole = rnd.randrange(n)
    rr = NearMissReranker(table, penalty, weight)
    rr.table[ids[hole]] = (None, "error: timeout")
    items = rerank(REQ, ids, None, load_image, rr, top_n=n)
    scored = [c for c in ids[:n] if c != ids[hole]]

    def key(c):
        p, pn = table[c]
        return p - (penalty * pn if penalty else 0.0) - weight * ids.index(c)

    expect = sorted(scored, key=lambda c: (-key(c), -table[c][0], ids.index(c)))
    expect.insert(hole, ids[hole])
    assert [it.candidate_id for it in items] == expect + ids[n:]
    moved = {it.candidate_id: it.new_rank for it in items}
    assert all(moved[c] == ids.index(c) for c in ids[n:]) and moved[ids[hole]] == hole


def test_cache_keeps_p_near_and_upgrades_an_old_cache(tmp_path):
    import sqlite3

    path = tmp_path / "scores.sqlite"
    db = sqlite3.connect(path)  # a cache written before P(near) existed
    db.executescript("""
        CREATE TABLE scores (spec_hash TEXT NOT NULL, instruction TEXT NOT NULL, reference_ids TEXT NOT NULL,
            candidate_id TEXT NOT NULL, p_yes REAL, logit_yes REAL, logit_no REAL, flag TEXT, created REAL NOT NULL,
            PRIMARY KEY (spec_hash, instruction, reference_ids, candidate_id)) WITHOUT ROWID;
        CREATE TABLE specs (spec_hash TEXT PRIMARY KEY, spec_json TEXT NOT NULL, created REAL NOT NULL);
        INSERT INTO scores VALUES ('h', 'q', '["r"]', 'old', 0.25, -1.0, 0.1, NULL, 0.0);
    """)
    db.commit()
    db.close()
    with ScoreCache(path) as cache:
        assert cache.warning is None
        old = cache.get_many("h", "q", ["r"], ["old"])["old"]
        assert old.p_yes == 0.25 and old.p_near is None
        cache.put_many("h", "q", ["r"], [CandidateScore("new", 0.5, 0.0, 0.0, None, 0.875)])
    with ScoreCache(path) as cache:
        assert cache.get_many("h", "q", ["r"], ["new"])["new"].p_near == 0.875


def test_scores_from_logits_are_the_logistic_of_each_row_bit_for_bit():
    """P(yes) and P(near) of every row, converted in one call for many queries' candidates, equal
    `sigmoid` of that row's margin and near logit taken one value at a time (the oracle), to the bit:
    the stored scores of an eval depend on it; a non-finite row is an error flag."""
    import numpy as np

    from cir_demo.rerank.base import scores_from_logits, sigmoid

    rng = np.random.default_rng(7)
    logits = rng.standard_normal((500, 3)) * rng.choice([1e-3, 1.0, 8.0, 60.0], size=(500, 1))
    logits[:4] = [[0.0, 0.0, 0.0], [800.0, -800.0, -900.0], [-40.0, 40.0, 50.0], [1e-300, -1e-300, -0.0]]
    logits[9, 1] = np.nan
    ids = [f"c{i}" for i in range(len(logits))]
    for width in (3, 2):
        got = scores_from_logits(ids, logits[:, :width])
        for s, row in zip(got, logits[:, :width].tolist()):
            if not np.isfinite(row).all():
                assert s.p_yes is None and s.flag.startswith("error: non-finite")
                continue
            assert s.flag is None and (s.logit_yes, s.logit_no) == (row[0], row[1])
            assert s.p_yes == sigmoid(row[0] - row[1]) and s.p_near == (sigmoid(row[2]) if width == 3 else None)

"""Real edits, sent the way models send them, through the real worker (see ``edit_corpus``).

A fixed seeded sample keeps this quick; ``make bench`` runs the whole
corpus and prints the same table.
"""

from __future__ import annotations

import edit_corpus as corpus

SEED = 20261123


def test_edit_corpus_01_real_edits_land_where_meant_or_are_refused_with_a_pointer() -> None:
    cases = corpus.build(SEED, history=6, stdlib=4, versions=False)
    tools = {c.tool for c in cases}
    noises = {c.noise for c in cases}
    # The sample covers every tool and every kind of noise the corpus knows.
    assert tools == set(corpus.TOOL_ORDER)
    assert noises == set(corpus.NOISE_ORDER)
    tally = corpus.run_all(cases)
    report = tally.table() + "\n" + "\n".join(tally.failures[:20])
    print(report)
    assert tally.rate("correct", noises={"clean"}) == 1.0, report
    recoverable = corpus.RECOVERABLE
    assert tally.total(noises=recoverable) >= 150, report
    assert tally.rate("correct", noises=recoverable) >= 0.95, report
    written_wrong = set(corpus.NOISE_ORDER) - {"off by N, without expected"}
    assert tally.rate("wrong", noises=written_wrong) == 0.0, report
    assert tally.total(noises=corpus.MISSED_MATCH) >= 20, report
    assert tally.rate("refused with pointer", noises=corpus.MISSED_MATCH) >= 0.95, report
    refusals = {"double-escaped", "placeholder"}
    assert tally.rate("refused with pointer", noises=refusals) == 1.0, report

"""storage/searches.py `matches`, each of its decisions at its exact boundary, on a `Table`
in memory with words chosen so every cost is known: which pool keeps a query (a match
reading 1,024 ids or more among the costly, 1,023 or fewer among the cheap; several words,
or one prefix of several indexed words, never one word's postings as they are), at how many
rows since it is replayed rather than matched again (a row costs 500 ids, against the ids
its match read), the entry it leaves (the matches, the row count, the last row object, the
ids read), a table loaded from a snapshot (no rows yet), the bounds (16 costly queries a
table, the next dropping them all; 64 cheap ones, the next dropping the oldest, never a
costly one), and a model with no `@search` field.

A replayed entry keeps its set object and a matched-again one is a new set: the identity
is how these tests tell the two paths apart (both give the same ids, which the churn tests
of test_storage_search_kept.py hold to the reference)."""

from __future__ import annotations

from dbsvc.compiler import compile_schema
from dbsvc.schema import parse_schema
from dbsvc.storage.rows import pack
from dbsvc.storage.searches import matches
from dbsvc.storage.table import Table
from tests.storage.test_storage_plan_units import ITEM

PLAIN = compile_schema(parse_schema("model Plain {\n  id int @id\n  k str @filter\n}\n", "plain.dbs")).BY_NAME["Plain"]


def record(i: int, w: str | None) -> dict:
    return {"id": i, "n": 1, "f": 1.0, "s": None, "k": "x", "g": None, "w": w}


def table_of(*groups: tuple[int, str | None]) -> tuple[Table, int]:
    """A table of `count` records of text `w` per (count, w) group, ids from 1; the next id."""
    table, i = Table(ITEM), 1
    for count, w in groups:
        for _ in range(count):
            table.insert(ITEM.row(record(i, w)))
            i += 1
    return table, i


def kept(table: Table) -> dict:
    assert table.words is not None
    return table.words.kept


def cheap(table: Table) -> dict:
    assert table.words is not None
    return table.words.cheap


def test_a_match_reading_1024_ids_is_kept_among_the_costly_and_1023_among_the_cheap():
    # "alpha" holds 1,024 ids, all matching; "beta" 1,524: the cheapest word reads 1,024
    table, _ = table_of((1024, "alpha beta"), (500, "beta"))
    assert matches(table, ("alpha", "beta")) == set(range(1, 1025))
    assert (set(kept(table)), cheap(table)) == ({("alpha", "beta")}, {})
    table, _ = table_of((1023, "alpha beta"), (500, "beta"))
    found = matches(table, ("alpha", "beta"))
    assert found == set(range(1, 1024))
    assert kept(table) == {} and cheap(table) == {("alpha", "beta"): (found, 1523, table.rows[-1], 1023)}
    assert matches(table, ("alpha", "beta")) is found  # no write since: the kept set itself


def test_a_cheap_query_of_few_matches_is_kept_and_answered_from_it():
    table, _ = table_of((3, "alpha beta"), (40, "alpha"), (60, "beta"), (2000, "gamma"))
    found = matches(table, ("alpha", "beta"))
    assert found == {1, 2, 3} and cheap(table)[("alpha", "beta")][3] == 43
    assert matches(table, ("alpha", "beta")) is found
    assert matches(table, ("zeta", "alpha")) == set()  # a word no record holds: kept empty
    assert cheap(table)[("zeta", "alpha")][::3] == (set(), 0)


def test_one_words_postings_are_never_kept_but_a_prefix_of_two_words_is():
    table, _ = table_of((1000, "alpha"), (100, "alps"), (2000, "beta"))
    assert len(matches(table, ("beta",))) == 2000
    assert len(matches(table, ("alpha",))) == 1000
    assert len(matches(table, ("alps",))) == 100
    assert kept(table) == {} and cheap(table) == {}
    assert matches(table, ("al",)) == set(range(1, 1101))  # "alpha" and "alps": 1,100 ids read
    assert set(kept(table)) == {("al",)}
    table, _ = table_of((1100, "alps"), (10, "beta"))
    assert len(matches(table, ("al",))) == 1100  # a prefix of one word: its postings
    assert len(matches(table, ("be",))) == 10
    assert kept(table) == {} and cheap(table) == {}


def test_the_entry_is_the_matches_the_row_count_and_the_last_row():
    table, next_id = table_of((1100, "alpha beta"), (10, "gamma"))
    found = matches(table, ("alpha", "beta"))
    assert kept(table)[("alpha", "beta")] == (found, 1110, table.rows[-1], 1100)
    assert kept(table)[("alpha", "beta")][2] is table.rows[1109]
    assert matches(table, ("alpha", "beta")) is found  # no write since: the kept set itself
    table.insert(ITEM.row(record(next_id, "alphabet betamax")))  # a match
    again = matches(table, ("alpha", "beta"))
    assert again is found and next_id in again
    assert kept(table)[("alpha", "beta")] == (found, 1111, table.rows[-1], 1100)
    assert kept(table)[("alpha", "beta")][2] is table.rows[1110]


def test_rows_are_replayed_while_500_an_id_is_within_1024_when_the_matches_are_fewer():
    # 100 matches, the cheapest word reading 1,100: replayed up to 2 rows (1,000 <= 1,024)
    for writes, replayed in ((1, True), (2, True), (3, False)):
        table, next_id = table_of((100, "alpha beta"), (1000, "alpha"), (1000, "beta"))
        found = matches(table, ("alpha", "beta"))
        assert len(found) == 100 and ("alpha", "beta") in kept(table)
        for i in range(writes):  # each a match
            table.insert(ITEM.row(record(next_id + i, "alpha beta")))
        again = matches(table, ("alpha", "beta"))
        assert (again is found) == replayed, writes
        assert again == set(range(1, 101)) | set(range(next_id, next_id + writes))
        assert kept(table)[("alpha", "beta")][:2] == (again, 1100 + 1000 + writes)


def test_rows_are_replayed_while_500_an_id_is_within_the_matches_when_they_are_more():
    # 1,500 matches: replayed up to 3 rows (1,500 <= 1,500), matched again at 4
    for writes, replayed in ((3, True), (4, False)):
        table, next_id = table_of((1500, "alpha beta"))
        found = matches(table, ("alpha", "beta"))
        for i in range(writes):  # no match: each one leaves the matches as they are
            table.insert(ITEM.row(record(next_id + i, "gamma")))
        again = matches(table, ("alpha", "beta"))
        assert (again is found) == replayed, writes
        assert again == set(range(1, 1501))


def test_a_replay_adds_a_new_match_and_takes_out_a_replaced_or_deleted_one():
    table, next_id = table_of((1100, "alpha beta"), (5, "gamma"))
    found = matches(table, ("alpha", "beta"))
    table.replace(table.live[1], ITEM.row(record(1, "gamma")))  # out of the matches
    table.delete(2, table.live[2])  # out
    assert matches(table, ("alpha", "beta")) is found
    assert found == set(range(3, 1101))
    table.replace(table.live[1101], ITEM.row(record(1101, "betas alphas")))  # into them
    table.replace(table.live[3], ITEM.row(record(3, None)))  # no text: out
    assert matches(table, ("alpha", "beta")) is found
    assert found == set(range(4, 1102))
    table.insert(ITEM.row(record(next_id, "alpha")))  # one word only: not a match
    assert matches(table, ("alpha", "beta")) is found
    assert next_id not in found


def test_an_ids_last_row_wins_in_a_replay():
    table, next_id = table_of((1100, "alpha beta"))
    found = matches(table, ("alpha", "beta"))
    table.insert(ITEM.row(record(next_id, "alpha beta")))
    table.replace(table.live[next_id], ITEM.row(record(next_id, "gamma")))
    assert matches(table, ("alpha", "beta")) is found
    assert found == set(range(1, 1101))
    table.replace(table.live[5], ITEM.row(record(5, "gamma")))
    table.replace(table.live[5], ITEM.row(record(5, "alpha beta")))
    assert matches(table, ("alpha", "beta")) is found
    assert 5 in found


def test_a_row_undone_is_matched_again_and_the_entry_follows_the_new_rows():
    table, next_id = table_of((1100, "alpha beta"))
    table.insert(ITEM.row(record(next_id, "alpha beta")))
    found = matches(table, ("alpha", "beta"))
    table.undo_last(table.max_id)  # the row it was kept at is gone: fewer rows than its count
    again = matches(table, ("alpha", "beta"))
    assert again is not found and again == set(range(1, 1101))
    assert kept(table)[("alpha", "beta")] == (again, 1100, table.rows[-1], 1100)


def test_a_table_loaded_from_a_snapshot_keeps_its_entry_at_no_rows_and_replays_the_first():
    base = Table(ITEM)
    values = [ITEM.row(record(i, "alpha beta")) for i in range(1, 1101)]
    base.load_base(
        [pack(ITEM.fields, v) for v in values],
        {p: [ITEM.keys[ITEM.fields[p]](v[p]) for v in values] for p in base.columns},
        1100,
    )
    assert base.rows == []
    found = matches(base, ("alpha", "beta"))
    assert found == set(range(1, 1101))
    assert kept(base)[("alpha", "beta")] == (found, 0, None, 1100)
    assert matches(base, ("alpha", "beta")) is found
    base.insert(ITEM.row(record(1101, "alpha beta")))
    assert matches(base, ("alpha", "beta")) is found
    assert found == set(range(1, 1102))
    assert kept(base)[("alpha", "beta")] == (found, 1, base.rows[0], 1100)


def test_the_seventeenth_kept_query_drops_the_sixteen_before_it():
    words = [f"w{c}" for c in "abcdefghijklmnopqr"]  # 18 words, each in every record
    table, _ = table_of((1100, " ".join(words)))
    for n, word in enumerate(words[1:], 1):  # 17 queries of two words
        assert len(matches(table, ("wa", word))) == 1100
        assert len(kept(table)) == (n if n <= 16 else 1), n
    assert set(kept(table)) == {("wa", words[-1])}
    assert len(matches(table, ("wa", words[-1]))) == 1100  # found again, not dropped
    assert len(kept(table)) == 1


def test_a_model_without_a_search_field_matches_nothing():
    table = Table(PLAIN)
    for i in range(1, 4):
        table.insert(PLAIN.row({"id": i, "k": "x"}))
    assert table.words is None
    assert matches(table, ("x",)) == set()


def test_a_cheap_querys_rows_are_replayed_while_500_an_id_is_within_1024():
    # "alpha" reads 600 ids, "beta" 400: both replay up to 2 rows (1,000 <= 1,024), not 3
    for query, writes, replayed in (
        (("alpha", "zed"), 2, True),
        (("alpha", "zed"), 3, False),
        (("beta", "zed"), 2, True),
        (("beta", "zed"), 3, False),
    ):
        table, next_id = table_of((600, "alpha zed"), (400, "beta zed"))
        found = matches(table, query)
        before = len(found)
        assert before == 600 if query[0] == "alpha" else 400
        assert cheap(table)[query][0] is found
        for i in range(writes):  # each a match of both queries
            table.insert(ITEM.row(record(next_id + i, "alpha beta zed")))
        again = matches(table, query)
        assert (again is found) == replayed, (query, writes)
        assert set(range(next_id, next_id + writes)) <= again and len(again) == before + writes
        assert cheap(table)[query][:2] == (again, 1000 + writes)


def test_a_replayed_row_holding_the_query_words_inside_its_words_is_no_match():
    table, next_id = table_of((30, "alpha beta"), (50, "alpha"))
    found = matches(table, ("alp", "bet"))
    table.insert(ITEM.row(record(next_id, "xalpha xbeta")))  # substrings, no word starts with them
    table.insert(ITEM.row(record(next_id + 1, "Alphabet BETTER")))  # a match, in other letter cases
    assert matches(table, ("alp", "bet")) is found
    assert found == set(range(1, 31)) | {next_id + 1}


def test_the_sixty_fifth_cheap_query_drops_the_oldest_and_never_a_costly_one():
    words = [f"w{i}" for i in range(66)]
    table, _ = table_of((1100, "alpha beta"), (20, " ".join(words)))
    costly = matches(table, ("alpha", "beta"))
    for n, word in enumerate(words[1:], 1):  # 65 cheap queries of two words
        assert matches(table, ("w0", word)) == set(range(1101, 1121))
        assert len(cheap(table)) == min(n, 64), n
    assert ("w0", words[1]) not in cheap(table) and ("w0", words[2]) in cheap(table)
    assert list(cheap(table))[-1] == ("w0", words[-1])
    assert kept(table)[("alpha", "beta")][0] is costly
    assert matches(table, ("alpha", "beta")) is costly

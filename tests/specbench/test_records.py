"""records.jsonl survives crashes: one write per line, torn last lines set aside, retries superseding failures."""

import json
import os

import pytest

from specbench import records
from specbench.errors import SpecbenchError
from specbench.records import (RecordWriter, compact_records, iter_finished_ids, read_all_records, read_records,
                               set_aside_torn_tail)


def lines_of(*recs):
    return "".join(json.dumps(r) + "\n" for r in recs)


def test_a_torn_last_line_is_left_out_when_read_and_set_aside_for_resume(synth, capsys):
    a, b = synth.record("q1", [synth.step(1, 2)]), synth.record("q2", [synth.step(0, 2)])
    run = synth.run("torn", [a])
    full = json.dumps(b)
    (run / "records.jsonl").write_text(lines_of(a) + full[: len(full) // 2])      # killed mid-write
    assert [r["question_id"] for r in read_records(run)] == ["q1"]
    err = capsys.readouterr().err
    assert "records.jsonl:2: last line is torn" in err and "--resume" in err and len(err.splitlines()) == 1

    note = set_aside_torn_tail(run)
    assert "records.jsonl:2: torn last line" in note and "records.jsonl.torn" in note
    assert (run / "records.jsonl").read_text() == lines_of(a)
    assert (run / "records.jsonl.torn").read_text() == full[: len(full) // 2] + "\n"
    assert set_aside_torn_tail(run) is None                                       # nothing left to repair

    (run / "records.jsonl").write_text(lines_of(a) + full[:10])                   # a second crash appends
    set_aside_torn_tail(run)
    assert (run / "records.jsonl.torn").read_text().splitlines() == [full[: len(full) // 2], full[:10]]


def test_a_last_record_that_lacks_only_its_newline_is_kept(synth):
    a, b = synth.record("q1", [synth.step(1, 2)]), synth.record("q2", [synth.step(0, 2)])
    run = synth.run("nonl", [])
    (run / "records.jsonl").write_text(lines_of(a) + json.dumps(b))
    assert [r["question_id"] for r in read_records(run)] == ["q1", "q2"]
    assert set_aside_torn_tail(run) is None
    assert (run / "records.jsonl").read_text() == lines_of(a, b) and not (run / "records.jsonl.torn").exists()


def test_a_bad_line_before_the_last_is_an_error_naming_file_and_line(synth):
    a = synth.record("q1", [synth.step(1, 2)])
    run = synth.run("mid", [])
    (run / "records.jsonl").write_text(lines_of(a) + '{"question_id": "q2", "cut\n' + lines_of(a))
    with pytest.raises(SpecbenchError, match=r"records.jsonl:2: not valid JSON"):
        read_records(run)
    (run / "records.jsonl").write_bytes(lines_of(a).encode() + b'"\xff\xfe"\n')
    with pytest.raises(SpecbenchError, match=r"records.jsonl:2: not valid UTF-8"):
        read_records(run)


def test_the_last_record_of_a_request_supersedes_the_earlier_ones(synth):
    failed = synth.record("q1", [], status="failed", n_out=0)
    ok1, ok2 = synth.record("q1", [synth.step(2, 2)]), synth.record("q2", [synth.step(1, 2)])
    run = synth.run("retry", [failed, ok2, ok1])
    assert [(r["question_id"], r["status"]) for r in read_records(run)] == [("q2", "ok"), ("q1", "ok")]
    assert sorted(iter_finished_ids(run)) == ["q1", "q2"]
    assert len(read_all_records(run)) == 3

    assert compact_records(run) == 1
    assert (run / "records.jsonl").read_text() == lines_of(ok2, ok1)
    assert compact_records(run) == 0


def test_summaries_count_each_request_once(synth):
    from specbench.analysis.metrics import summarize_run

    failed = synth.record("q1", [], status="failed", n_out=0)
    run = synth.run("sum", [failed, synth.record("q2", [synth.step(1, 2)]), synth.record("q1", [synth.step(1, 2)])])
    s = summarize_run(run)
    assert (s["n_ok"], s["n_failed"]) == (2, 0)


def test_each_record_is_one_write_of_its_whole_line(tmp_path, monkeypatch, synth):
    """A record spans many kilobytes; buffered text I/O would split it into several writes, and a crash between
    them would tear a line before the last one."""
    writes = []
    real_write = os.write
    monkeypatch.setattr(records.os, "write", lambda fd, data: (writes.append(bytes(data)), real_write(fd, data))[1])
    big = synth.record("q1", [synth.step(3, 4)] * 2000)
    with RecordWriter(tmp_path) as w:
        w.write(big)
        w.write(synth.record("q2", [synth.step(1, 2)]))
    assert len(writes) == 2 and len(writes[0]) > 50_000 and writes[0].endswith(b"\n")
    assert [r["question_id"] for r in read_records(tmp_path)] == ["q1", "q2"]

"""Reports from synthetic run dirs: the numbers in leaderboard.md, the HTML in headless Chromium, and the CLI."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import pandas as pd
import pytest
from typer.testing import CliRunner

from specbench.analysis.frame import COLUMNS, runs_frame
from specbench.analysis.headline import sentences
from specbench.analysis.metrics import summarize_run
from specbench.cli import app
from specbench.report import render_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def run_dirs(synth):
    """prompt-enhancement at C=1 (vanilla + ngram L=4, one compare) and C=8, and fireworks with no vanilla.

    Hand-computed for ngram C=1: 14 tokens emitted over 6 steps (AL 2.33; per request 2.5 and 2.0), 5 of 6 steps
    accept the first draft, 16 tokens over 1 s of busy time vs vanilla's 20 over 2 s (speedup 1.6), TPOT
    (0.4/10 + 0.4/4) / 2 = 70 ms.
    """
    rec, step = synth.record, synth.step
    compare = "specbench compare --methods vanilla,ngram --budget 4 --concurrency 1"
    van = synth.run("van-c1", [
        rec("q1", [step(0, 0)] * 9, category="text-to-image", method="vanilla", t_start=0.0),
        rec("q2", [step(0, 0)] * 9, category="text-to-video", method="vanilla", t_start=1.0),
    ], compare_id="cmp1", command=compare,
        machine_load={"foreign_cpu_share": 0.2, "steal_share": 0.01, "wall_s": 2.0, "cpus": 2})
    ngram = synth.run("ng-c1", [
        rec("q1", [step(3, 3), step(1, 3), step(0, 3), step(2, 3)], category="text-to-image", t_start=10.0,
            latency=0.5),
        rec("q2", [step(1, 3), step(1, 3)], category="text-to-video", t_start=10.5, latency=0.5),
        rec("q3", [step(3, 3)], category="text-to-video", status="failed", t_start=11.0, latency=5.0),
    ], method="ngram", budget=4, compare_id="cmp1", command=compare)
    van8 = synth.run("van-c8", [rec(f"q{i}", [step(0, 0)] * 4, method="vanilla", latency=2.0) for i in (1, 2)],
                     concurrency=8, compare_id="cmp8")
    ng8 = synth.run("ng-c8", [rec(f"q{i}", [step(1, 3)] * 2, latency=1.0) for i in (1, 2)],
                    method="ngram", budget=4, concurrency=8, compare_id="cmp8")
    fw = synth.run("fw-ng", [rec("c1", [step(2, 3)], category="chat")], method="ngram", budget=4,
                   dataset="fireworks", command="specbench run --method ngram --budget 4 --dataset fireworks",
                   device="cuda:0 (NVIDIA H200)", dtype="bfloat16", versions={"torch": "2.13.0"})
    return [van, ngram, van8, ng8, fw]


def _md_tables(text: str) -> dict[tuple[str, str], list[dict[str, str]]]:
    """Markdown tables keyed by (latest ## heading, latest heading), each as a list of {column: cell}."""
    tables: dict[tuple[str, str], list[dict[str, str]]] = {}
    h2 = last = ""
    rows: list[list[str]] = []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip("|").split(" | ")])
            continue
        if rows:  # header, separator, data rows
            tables[(h2, last)] = [dict(zip(rows[0], row)) for row in rows[2:]]
            rows = []
        if line.startswith("#"):
            last = line.lstrip("#").strip()
            h2 = last if line.startswith("## ") else h2
    return tables


def _row(table: list[dict[str, str]], run: str) -> dict[str, str]:
    return next(r for r in table if r["run"] == run)


def test_leaderboard_tables_and_numbers(run_dirs, tmp_path):
    out = tmp_path / "report"
    written = render_report(run_dirs, out)
    assert [p.name for p in written] == ["leaderboard.md", "index.html", "speedup.png", "al_vs_budget.png",
                                         "hit_rate_by_depth.png", "al_by_entropy.png", "throughput.png"]
    md = (out / "leaderboard.md").read_text()
    tables = _md_tables(md)

    ng = _row(tables[("prompt-enhancement", "C=1")], "ng-c1")
    assert ng == {"engine": "reference", "method": "ngram", "L": "4", "drafts/step": "3.0", "AL": "2.33", "AL/req": "2.25",
                  "hit@1": "83.3%", "tok/s": "16.0", "speedup": "1.60×", "tok/s/user": "16.0", "TTFT ms": "100.0",
                  "TPOT ms": "70.0", "n": "2 (+1 failed)", "run": "ng-c1"}
    van = _row(tables[("prompt-enhancement", "C=1")], "van-c1")
    assert (van["AL"], van["hit@1"], van["tok/s"], van["speedup"], van["TPOT ms"]) == \
        ("1.00", "—", "10.0", "1.00×", "100.0")
    assert [r["run"] for r in tables[("prompt-enhancement", "C=1")]] == ["ng-c1", "van-c1"]  # fastest first

    t2i = tables[("prompt-enhancement", "prompt-enhancement · C=1 · text-to-image")]
    assert (_row(t2i, "ng-c1")["tok/s"], _row(t2i, "ng-c1")["speedup"], _row(t2i, "ng-c1")["AL"]) == \
        ("22.0", "2.20×", "2.50")
    t2v = tables[("prompt-enhancement", "prompt-enhancement · C=1 · text-to-video")]
    assert (_row(t2v, "ng-c1")["n"], _row(t2v, "ng-c1")["speedup"]) == ("1 (+1 failed)", "1.00×")

    c8 = tables[("prompt-enhancement", "C=8")]
    assert [(r["run"], r["tok/s"], r["speedup"]) for r in c8] == [("ng-c8", "10.0", "2.00×"),
                                                                    ("van-c8", "5.0", "1.00×")]
    assert _row(tables[("fireworks", "C=1")], "fw-ng")["speedup"] == "—"  # no vanilla run to compare with
    entropy = tables[("fireworks", "AL by entropy quartile")]
    assert [entropy[0][q] for q in ("Q1", "Q2")] == ["3.00 (1.00–1.00)", "—"]

    runs = {r["run"]: r for r in tables[("Runs", "Runs")]}
    assert (runs["ng-c1"]["vanilla baseline"], runs["ng-c8"]["vanilla baseline"], runs["fw-ng"]["vanilla baseline"]) \
        == ("van-c1", "van-c8", "—")
    assert (runs["van-c1"]["CPU taken by others"], runs["ng-c1"]["CPU taken by others"]) == ("21%", "—")
    assert "```\nspecbench run --method ngram --budget 4 --dataset fireworks\n```" in md
    assert "- **device**: cpu; cuda:0 (NVIDIA H200)" in md
    assert "- **dtype**: float32; bfloat16" in md
    assert "- **versions**: torch=2.13.0" in md
    assert "![Per-position hit rate by depth](hit_rate_by_depth.png)" in md
    assert "No drafted tokens, not shown: prompt-enhancement float32 vanilla L=1 C=1, " in md


def test_plot_without_data_is_named_in_both_pages(synth, tmp_path):
    run = synth.run("van", [synth.record("q", [synth.step(0, 0)], method="vanilla")])
    written = render_report([run], tmp_path / "out")
    assert "hit_rate_by_depth.png" not in {p.name for p in written}
    for page in ("leaderboard.md", "index.html"):
        text = (tmp_path / "out" / page).read_text()
        assert "No drafted tokens, not shown: vanilla." in text
        assert "hit_rate_by_depth.png" not in text


def test_html_escapes_and_markdown_pipes(synth, tmp_path):
    run = synth.run("odd", [synth.record("q", [synth.step(1, 2)], category="a|b")], method="ngram", budget=3,
                    command=["specbench", "run", "--dataset", "<x>&y"])
    render_report([run], tmp_path / "out")
    html = (tmp_path / "out" / "index.html").read_text()
    assert "specbench run --dataset &#39;&lt;x&gt;&amp;y&#39;" in html and "<x>" not in html
    md = (tmp_path / "out" / "leaderboard.md").read_text()
    assert "#### prompt-enhancement · C=1 · a|b" in md
    assert "specbench run --dataset '<x>&y'" in md


def _chromium(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'chromium-profile'}", *args],
        capture_output=True, text=True, timeout=90, check=True)


@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt-get install -y chromium)")
def test_index_html_renders_in_headless_chromium(run_dirs, tmp_path):
    out = tmp_path / "report"
    render_report(run_dirs, out)
    url = (out / "index.html").as_uri()
    shot = tmp_path / "shot.png"
    _chromium(f"--screenshot={shot}", "--window-size=1280,2000", url, tmp_path=tmp_path)
    pixels = matplotlib.image.imread(shot)[..., :3]
    assert pixels.std() > 0.05, "screenshot is blank"
    assert (pixels.mean(axis=2) < 0.5).mean() > 0.005, "almost no dark (text) pixels"

    dom = _chromium("--dump-dom", url, tmp_path=tmp_path).stdout
    md_tables = sum(1 for i, line in enumerate((out / "leaderboard.md").read_text().splitlines())
                    if line.startswith("| engine") or line.startswith("| run"))
    assert dom.count("<table>") == md_tables > 5
    assert '<td class="num">1.60×</td>' in dom and '<td class="num">83.3%</td>' in dom
    assert dom.count('<img src="') == 4
    assert_no_sideways_scroll(out / "index.html", tmp_path=tmp_path)


# A copy of the page gets this script (the report itself has none): it opens every <details>, then writes the
# page's and each table box's scroll and client widths into the DOM, which --dump-dom brings back.
MEASURE_WIDTHS = """<script>
document.querySelectorAll("details").forEach(d => { d.open = true; });
const root = document.documentElement;
const boxes = [...document.querySelectorAll("table")].map(t => [t.parentElement.scrollWidth,
  t.parentElement.clientWidth, t.caption ? t.caption.textContent : ""]);
const out = document.createElement("pre");
out.id = "widths";
out.textContent = JSON.stringify({page: [root.scrollWidth, root.clientWidth], boxes: boxes});
document.body.appendChild(out);
</script>"""


def assert_no_sideways_scroll(page: Path, tmp_path: Path, width: int = 1400) -> None:
    """At `width` px with every <details> open, neither the page nor any table's box scrolls horizontally."""
    probe = page.with_name("measure-widths.html")
    probe.write_text(page.read_text().replace("</body>", MEASURE_WIDTHS + "</body>"))
    dom = _chromium("--dump-dom", f"--window-size={width},1000", probe.as_uri(), tmp_path=tmp_path).stdout
    probe.unlink()
    widths = json.loads(html.unescape(re.search(r'<pre id="widths">(.*?)</pre>', dom, re.S).group(1)))
    assert widths["page"][0] <= widths["page"][1], f"the page scrolls sideways: {widths['page']}"
    wide = [box for box in widths["boxes"] if box[0] > box[1]]
    assert widths["boxes"] and not wide, f"tables wider than their box (scroll, client, caption): {wide}"


@pytest.fixture
def wide_run_dirs(synth):
    """Runs whose tables carry every column and long cells, as a demo's do: a variant's label, long run ids,
    step times, failed requests, a long device name and compare id."""
    rec, step = synth.record, synth.step
    timed = lambda a: {**step(a, 15), "draft_ms": 12.6, "verify_ms": 123.9}  # noqa: E731
    common = dict(concurrency=8, compare_id="prompt-enhancement-c8-20261205-163619", dtype="bfloat16",
                  device="cpu: Intel(R) Xeon(R) Platinum 8480+ (2 cores, AMX)", created="2026-12-05T16:36:27+00:00",
                  machine_load={"foreign_cpu_share": 0.012, "steal_share": 0.0, "wall_s": 2.0, "cpus": 2})
    runs = [synth.run("vanilla-L1-C8-prompt-enhancement-interleaved",
                      [rec(f"q{i}", [{**step(0, 0), "draft_ms": 0.0, "verify_ms": 21.8}] * 9, method="vanilla",
                           category="image-to-video", latency=12.5) for i in range(3)], **common)]
    for method, variant in (("eagle4-harness", {"lookup": "off"}), ("eagle4-tree", None)):
        for budget in (4, 16):
            records = [rec(f"q{i}", [timed(3)] * 9, method=method, category="image-to-video", latency=10.25)
                       for i in range(3)]
            records.append(rec("q9", [timed(1)], method=method, category="image-to-video", status="failed"))
            runs.append(synth.run(f"{method}-{'-'.join(map(str, (variant or {}).values()))}-L{budget}-C8-interleaved",
                                  records, method=method, budget=budget, variant=variant, **common))
    return runs


@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt-get install -y chromium)")
def test_no_table_scrolls_sideways_at_1400px(wide_run_dirs, tmp_path):
    render_report(wide_run_dirs, tmp_path / "wide")
    assert_no_sideways_scroll(tmp_path / "wide" / "index.html", tmp_path=tmp_path)


def test_cli_summarize_table_and_json(run_dirs):
    result = CliRunner().invoke(app, ["summarize", str(run_dirs[0]), str(run_dirs[1])], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    ng_line = next(line for line in result.output.splitlines() if "ng-c1" in line)
    assert re.search(r"2\.33 .* 2\.25 .* 83\.3% .* 16\.0 .* 1\.60 ", ng_line), ng_line

    result = CliRunner().invoke(app, ["summarize", "--json", str(run_dirs[1])])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == [summarize_run(run_dirs[1])]


def test_cli_report_prints_paths(run_dirs, tmp_path):
    result = CliRunner().invoke(app, ["report", *map(str, run_dirs), "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    paths = result.output.split()
    assert paths[:2] == [str(tmp_path / "r" / "leaderboard.md"), str(tmp_path / "r" / "index.html")]
    assert len(paths) == 7 and all(Path(p).is_file() for p in paths)


def test_cli_rejects_a_dir_that_is_not_a_run(tmp_path):
    not_a_run = tmp_path / "not-a-run"
    not_a_run.mkdir()
    result = subprocess.run([sys.executable, "-m", "specbench.cli", "report", str(not_a_run)],
                            capture_output=True, text=True, env={**os.environ, "COLUMNS": "400"}, timeout=60)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and str(not_a_run) in result.stderr


def test_step_time_columns_appear_where_runs_record_them(synth, tmp_path):
    """The reference engine records each step's drafting and verification time: the table shows their means
    beside the other columns; runs without them (other engines) keep the table as it was."""
    rec, step = synth.record, synth.step
    timed = lambda a, d, v: {**step(a, 3), "draft_ms": d, "verify_ms": v}  # noqa: E731
    runs = [synth.run("van", [rec("q1", [timed(0, 0.0, 50.0)] * 4, method="vanilla")], compare_id="c"),
            synth.run("ng", [rec("q1", [timed(2, 1.0, 54.0), timed(1, 3.0, 56.0)])], method="ngram", budget=4,
                      compare_id="c")]
    render_report(runs, tmp_path / "timed")
    table = _md_tables((tmp_path / "timed" / "leaderboard.md").read_text())[("prompt-enhancement", "C=1")]
    assert (_row(table, "ng")["draft ms"], _row(table, "ng")["verify ms"]) == ("2.0", "55.0")
    assert (_row(table, "van")["draft ms"], _row(table, "van")["verify ms"]) == ("0.0", "50.0")


def test_both_pages_open_with_the_headline(run_dirs, tmp_path):
    """The sentences and the speedup figure come before any table, the figure first among the images, and the
    long tables (by category, entropy, runs) are collapsed."""
    out = tmp_path / "report"
    render_report(run_dirs, out)
    assert (out / "speedup.png").is_file()
    said = sentences([summarize_run(d) for d in run_dirs])
    assert len(said) == 3 and "ngram L = 4 is fastest on prompt-enhancement (1.60× vanilla; no other method ran)" \
        in said[0] and "ngram L = 4 is fastest on prompt-enhancement (2.00× vanilla; no other method ran)" in said[1]

    md = (out / "leaderboard.md").read_text()
    first_table = md.index("\n| ")
    assert re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)[0] == "speedup.png" and md.index("(speedup.png)") < first_table
    assert all(0 < md.index(f"- {s}\n") < first_table for s in said)
    before = md[:md.index("#### prompt-enhancement · C=1 · text-to-image")]
    assert before.rindex("<details>") > before.rindex("</details>")         # inside a collapsed block

    page = (out / "index.html").read_text()
    first_table = page.index("<table>")
    assert re.findall(r'<img [^>]*src="([^"]+)"', page)[0] == "speedup.png" and page.index("speedup.png") < first_table
    assert all(0 < page.index(f"<li>{html.escape(s)}</li>") < first_table for s in said)
    assert "<details open" not in page
    # Tables a dataset shows at once: one per C; the others (by category, entropy) and the runs are collapsed.
    shown = re.sub(r"<details>.*?</details>", "", page, flags=re.S)
    assert shown.count("<table>") == 3 and "prompt-enhancement · C=1 · text-to-image" not in shown


def test_cli_summarize_writes_csv_and_parquet(run_dirs, tmp_path):
    """One row per run × category plus an "all" row per run; both files read back into the same DataFrame, and
    the table (or the JSON) still goes to stdout as before."""
    csv, parquet = tmp_path / "out" / "runs.csv", tmp_path / "out" / "runs.parquet"
    result = CliRunner().invoke(app, ["summarize", *map(str, run_dirs), "--csv", str(csv), "--parquet", str(parquet)],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "ng-c1" in result.output and "specbench summary" in result.output
    expected = runs_frame(run_dirs)
    assert len(expected) == sum(1 + len(summarize_run(d)["per_category"]) for d in run_dirs)
    pd.testing.assert_frame_equal(pd.read_parquet(parquet), expected)
    pd.testing.assert_frame_equal(pd.read_csv(csv, dtype=COLUMNS), expected)
    ng = pd.read_csv(csv).set_index(["run_id", "category"]).loc[("ng-c1", "all")]
    assert (ng["speedup"], ng["hit_at_1"], ng["n_ok"], ng["n_failed"]) == (pytest.approx(1.6), pytest.approx(5 / 6), 2, 1)

    result = CliRunner().invoke(app, ["summarize", "--json", str(run_dirs[1]), "--csv", str(tmp_path / "one.csv")])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == [summarize_run(run_dirs[1])]
    assert len(pd.read_csv(tmp_path / "one.csv")) == 3          # all, text-to-image, text-to-video


def test_engine_counters_shown_beside_records_with_a_flag(synth, tmp_path):
    """A server run's AL from its records and from the engine's counters side by side in both pages, with the
    engine's own definition named and a gap above 2% flagged; reference runs add no such section."""
    rec, step = synth.record, synth.step
    summary = {"al": 2.2, "al_engine": 2.6, "al_engine_definition": "vLLM: 1 + accepted / drafting steps",
               "hit_rate_unconditional": [2 / 3]}
    run = synth.run("vl", [rec("q1", [step(2, 3), step(0, 3), step(1, 3)])], method="ngram", budget=4,
                    engine="vllm", engine_counters={"source": "vLLM /metrics", "summary": summary})
    render_report([run], tmp_path / "r")
    text = (tmp_path / "r" / "leaderboard.md").read_text()
    row = _row(_md_tables(text)[("Engine counters", "Engine counters")], "vl")
    assert (row["AL records"], row["AL counters"], row["gap"], row["AL engine's own"]) == ("2.000", "2.200",
                                                                                        "+10.0%", "2.600")
    assert row["check"] == "differs > 2%" and "vLLM: 1 + accepted / drafting steps" in text
    assert "Engine counters" in (tmp_path / "r" / "index.html").read_text()
    plain = synth.run("ref", [rec("q1", [step(1, 3)])], method="ngram", budget=4)
    render_report([plain], tmp_path / "p")
    assert "Engine counters" not in (tmp_path / "p" / "leaderboard.md").read_text()


# -- repeats, latency and goodput -----------------------------------------------------------------------------------

@pytest.fixture
def repeat_dirs(synth):
    """vanilla and ngram, two repeats each in one comparison: vanilla 10 then 20 tok/s, ngram 20 then 60, so
    ngram's speedups are 2 and 3 (mean 2.5, 95% t half-width 12.706 * 0.5 = 6.35) and its tok/s 40 +- 254.12."""
    rec, step = synth.record, synth.step
    dirs = []
    for k, (van, ng) in enumerate([(1.0, 0.5), (0.5, 1 / 6)], 1):
        dirs.append(synth.run(f"vanilla-L1-C1-r{k}", [rec("q", [step(0, 0)] * 9, method="vanilla", latency=van,
                                                        t_start=10.0 * k)],
                              compare_id="cmp", repeat=k, repeats=2))
        dirs.append(synth.run(f"ngram-L4-C1-r{k}", [rec("q", [step(2, 3)] * 3, latency=ng, t_start=10.0 * k + 5)],
                              method="ngram", budget=4, compare_id="cmp", repeat=k, repeats=2))
    return dirs


def test_repeats_are_one_row_with_means_and_confidence_intervals(repeat_dirs, tmp_path):
    render_report(repeat_dirs, tmp_path / "r")
    md = (tmp_path / "r" / "leaderboard.md").read_text()
    tables = _md_tables(md)
    rows = tables[("prompt-enhancement", "C=1")]
    assert [r["run"] for r in rows] == ["ngram-L4-C1", "vanilla-L1-C1"]
    ng = rows[0]
    assert (ng["tok/s"], ng["speedup"], ng["n"]) == ("40.0 ± 254.1", "2.50× ± 6.35", "2 in 2 repeats")
    assert ng["AL"] == "3.00 ± 0.00"
    assert "**± x**: with repeats" in md
    assert len(tables[("Runs", "Runs")]) == 4                          # every repeat is listed as a run


def test_latency_table_and_goodput_column(synth, tmp_path):
    """The latency table shows TTFT, TPOT and ITL as mean and p50/p90/p99 (ITL only where records kept their
    gaps); --goodput adds the goodput column, and the legend names the objectives."""
    rec, step = synth.record, synth.step
    records = [{**rec(f"q{i}", [step(0, 0)] * 4, method="vanilla", ttft=0.1 * (i + 1), t_start=2.0 * i),
                "itl_s": [0.2] * 4} for i in range(3)]
    run = synth.run("van", records, engine="vllm")
    CliRunner().invoke(app, ["report", str(run), "--goodput", "ttft_ms:250", "tpot_ms:500", "--out",
                             str(tmp_path / "r")], catch_exceptions=False)
    md = (tmp_path / "r" / "leaderboard.md").read_text()
    tables = _md_tables(md)
    latency = _row(tables[("prompt-enhancement", "Latency")], "van")
    assert (latency["TTFT ms"], latency["TTFT p50/p90/p99"]) == ("200.0", "200.0/280.0/298.0")
    assert (latency["ITL ms"], latency["ITL p50/p90/p99"]) == ("200.0", "200.0/200.0/200.0")
    assert _row(tables[("prompt-enhancement", "C=1")], "van")["goodput req/s"] == "0.67"   # 2 of 3 over 3 s
    assert "time to first token ≤ 250 ms, time per output token after the first ≤ 500 ms" in md
    plain = synth.run("plain", [rec("q", [step(0, 0)], method="vanilla")])
    render_report([plain], tmp_path / "p")
    tables = _md_tables((tmp_path / "p" / "leaderboard.md").read_text())
    assert "goodput req/s" not in tables[("prompt-enhancement", "C=1")][0]
    assert "ITL ms" not in tables[("prompt-enhancement", "Latency")][0]


def test_cli_summarize_takes_goodput_objectives(run_dirs):
    result = CliRunner().invoke(app, ["summarize", "--json", str(run_dirs[2]), "--goodput", "ttft_ms:50"])
    assert result.exit_code == 0, result.output
    [summary] = json.loads(result.output)
    assert summary["goodput_slo"] == {"ttft": 50.0} and summary["goodput_req_s"] == 0.0
    result = CliRunner().invoke(app, ["summarize", str(run_dirs[2]), "--goodput", "ttft:x"])
    assert result.exit_code != 0 and "--goodput 'ttft:x'" in str(result.exception)

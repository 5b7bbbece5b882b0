"""Plots: what each figure draws, what it says it left out, and that a figure without data writes no file."""

from __future__ import annotations

import matplotlib.image
import numpy as np
import pytest

from specbench.analysis import plots
from specbench.analysis.metrics import summarize_run


@pytest.fixture
def summaries(synth):
    """vanilla, ngram L=4 and L=8 at C=1, vanilla and ngram L=4 at C=8; ngram accepts 1 of 3 (L=4), 3 of 7 (L=8).
    Four 1 s requests each, back to back at C=1 (4 s busy), all at once at C=8 (1 s busy)."""
    def run(run_id, method, budget, concurrency, accepted):
        depth = budget - 1
        records = [synth.record(f"q{i}", [synth.step(accepted, depth)] * 4, entropy=float(i),
                                t_start=float(i) if concurrency == 1 else 0.0) for i in range(4)]
        return summarize_run(synth.run(run_id, records, method=method, budget=budget, concurrency=concurrency))

    return [run("van1", "vanilla", 1, 1, 0), run("ng4", "ngram", 4, 1, 1), run("ng8", "ngram", 8, 1, 3),
            run("van8", "vanilla", 1, 8, 0), run("ng4c8", "ngram", 4, 8, 1)]


@pytest.fixture
def captured(monkeypatch):
    """The matplotlib figures the plot functions save, keyed by file name, so tests can read the drawn data."""
    figures = {}
    real_save = plots._save

    def save(fig, path):
        figures[path.name] = fig
        return real_save(fig, path)

    monkeypatch.setattr(plots, "_save", save)
    return figures


def _not_blank(path):
    pixels = matplotlib.image.imread(path)
    assert pixels.std() > 0.05, f"{path} looks blank"


def test_all_plots_write_non_blank_pngs(summaries, tmp_path):
    written = plots.all_plots(summaries, tmp_path / "out")
    assert [p.path.name for p in written] == ["al_vs_budget.png", "hit_rate_by_depth.png", "al_by_entropy.png",
                                              "throughput.png"]
    for p in written:
        _not_blank(p.path)


def test_al_vs_budget_one_line_per_method_and_concurrency(summaries, tmp_path, captured):
    plot = plots.al_vs_budget(summaries, tmp_path / "al.png")
    assert plot.note == ""
    lines = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
             for line in captured["al.png"].axes[0].lines}
    assert lines == {"ngram C=1": ([4, 8], [2.0, 4.0]), "ngram C=8": ([4], [2.0]),
                     "vanilla C=1": ([1], [1.0]), "vanilla C=8": ([1], [1.0])}


def test_hit_rates_name_the_runs_they_cannot_draw(summaries, tmp_path, captured):
    plot = plots.hit_rate_by_depth(summaries, tmp_path / "hits.png")
    assert plot.note == "No drafted tokens, not shown: vanilla L=1 C=1, vanilla L=1 C=8."
    unconditional, conditional = captured["hits.png"].axes
    ng8 = next(line for line in unconditional.lines if line.get_label() == "ngram L=8 C=1")
    assert list(ng8.get_ydata()) == pytest.approx([1, 1, 1, 0, 0, 0, 0])
    ng8_cond = next(line for line in conditional.lines if line.get_label() == "ngram L=8 C=1")
    # Depths 5..7 were never reached from depth 4: no rate, drawn as a gap.
    assert list(ng8_cond.get_ydata()[:4]) == [1, 1, 1, 0] and np.isnan(ng8_cond.get_ydata()[4:]).all()


def test_plot_without_data_writes_no_file_and_says_why(summaries, tmp_path):
    vanilla_only = [s for s in summaries if s["method"] == "vanilla"]
    (tmp_path / "hits.png").write_bytes(b"left by an earlier report")
    plot = plots.hit_rate_by_depth(vanilla_only, tmp_path / "hits.png")
    assert plot.path is None and not (tmp_path / "hits.png").exists()
    assert plot.note == "No drafted tokens, not shown: vanilla C=1, vanilla C=8."
    empty = plots.throughput_by_concurrency([], tmp_path / "tp.png")
    assert (empty.path, empty.note) == (None, "No runs to plot.")


def test_entropy_plot_leaves_out_runs_without_entropy(synth, summaries, tmp_path, captured):
    blind = summarize_run(synth.run("vllm", [synth.record("q", [synth.step(1, 3)], entropy=None)],
                                    engine="vllm", method="ngram", budget=4))
    plot = plots.al_by_entropy(summaries + [blind], tmp_path / "ent.png")
    assert "No entropy recorded, not shown: vllm ngram L=4 C=1." == plot.note
    labels = [line.get_label() for line in captured["ent.png"].axes[0].lines]
    assert len(labels) == len(summaries)
    only_blind = plots.al_by_entropy([blind], tmp_path / "none.png")
    assert only_blind.path is None and "No entropy recorded" in only_blind.note


def test_throughput_bars_grouped_by_concurrency(summaries, tmp_path, captured):
    plots.throughput_by_concurrency(summaries, tmp_path / "tp.png")
    ax = captured["tp.png"].axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["C=1", "C=8"]
    heights = {label: [round(b.get_height(), 6) for b in bars]
               for label, bars in zip([c.get_label() for c in ax.containers], ax.containers)}
    ng4_tokens, van_tokens = 4 * (1 + 4 * 2), 4 * (1 + 4)  # per request: prefill token + 4 steps
    assert heights == {
        "ngram L=4": [ng4_tokens / 4.0, ng4_tokens / 1.0],
        "ngram L=8": [4 * (1 + 4 * 4) / 4.0],
        "vanilla L=1": [van_tokens / 4.0, van_tokens / 1.0],
    }


def test_repeated_setting_draws_only_the_newest_run(summaries, synth, tmp_path, captured):
    older = summarize_run(synth.run("ng8-old", [synth.record("q", [synth.step(0, 7)])], method="ngram",
                                    budget=8, created="2026-01-01T00:00:00+00:00"))
    plot = plots.al_vs_budget(summaries + [older], tmp_path / "al.png")
    assert plot.note == "Repeated settings, only the newest run drawn; not shown: ng8-old."
    ngram_c1 = next(line for line in captured["al.png"].axes[0].lines if line.get_label() == "ngram C=1")
    assert list(ngram_c1.get_ydata()) == [2.0, 4.0]


def test_one_colour_per_method_and_one_legend_entry_per_key(summaries, tmp_path, captured):
    """Series are told apart by colour = method, line style = budget, marker = concurrency; the legend
    lists each of those once (a demo's 40-odd series would otherwise crowd out the axes)."""
    plots.hit_rate_by_depth(summaries, tmp_path / "hits.png")
    fig = captured["hits.png"]
    lines = {line.get_label(): line for line in fig.axes[0].lines}
    ng4, ng8, ng4_c8 = lines["ngram L=4 C=1"], lines["ngram L=8 C=1"], lines["ngram L=4 C=8"]
    assert ng4.get_color() == ng8.get_color() == ng4_c8.get_color()
    assert ng4.get_linestyle() != ng8.get_linestyle() and ng4.get_marker() != ng4_c8.get_marker()
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["ngram", "L=4", "L=8", "C=1", "C=8"]


def test_speedup_headline_one_panel_per_concurrency_with_vanilla_dashed(summaries, tmp_path, captured):
    """ngram L=4 emits 9 tokens a request and L=8 17, vanilla 5: 1.8× and 3.4× at C=1, 1.8× at C=8."""
    plot = plots.speedup_by_budget(summaries, tmp_path / "speedup.png")
    assert plot.note == ""
    _not_blank(plot.path)
    c1, c8 = captured["speedup.png"].axes
    assert (c1.get_title(), c8.get_title()) == ("prompt-enhancement · C=1", "prompt-enhancement · C=8")
    drawn = lambda ax: {line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))  # noqa: E731
                        for line in ax.lines if line.get_linestyle() != "--"}
    assert drawn(c1) == {"ngram": ([4, 8], pytest.approx([1.8, 3.4]))}
    assert drawn(c8) == {"ngram": ([4], pytest.approx([1.8]))}
    dashed = [line for line in c1.lines if line.get_linestyle() == "--"]
    assert len(dashed) == 1 and list(dashed[0].get_ydata()) == [1.0, 1.0]
    assert [t.get_text() for t in c1.texts] == ["3.40×"]      # the panel's best run, labelled


def test_speedup_headline_names_runs_without_vanilla_and_needs_a_method(synth, summaries, tmp_path):
    alone = summarize_run(synth.run("fw", [synth.record("q", [synth.step(1, 3)])], method="ngram", budget=4,
                                    dataset="fireworks"))
    plot = plots.speedup_by_budget(summaries + [alone], tmp_path / "speedup.png")
    assert plot.path is not None
    assert plot.note == "No vanilla run to compare with, not shown: fireworks ngram L=4 C=1."
    vanilla_only = plots.speedup_by_budget([s for s in summaries if s["method"] == "vanilla"], tmp_path / "v.png")
    assert (vanilla_only.path, vanilla_only.note) == (None, "No method besides vanilla ran.")
    nothing = plots.speedup_by_budget([alone], tmp_path / "none.png")
    assert nothing.path is None and nothing.note.startswith("No vanilla run to compare with")

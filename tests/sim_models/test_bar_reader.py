"""Reading bar heights off a chart image (sim_models/bar_reader.py, published_comet.read_figure): a figure drawn
with known values in the layout of COMET's end-to-end figure is read back within a pixel."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from sim_models import published_comet as comet_fig  # noqa: E402
from sim_models.bar_reader import find_frames, load_rgb, read_panel, tick_rows  # noqa: E402

TICKS = {4096: (0, 50, 100, 150, 200), 8192: (0, 100, 200, 300, 400)}


def _truth(seed):
    """Known bar heights per (model, M), in the figure's ranges; attention below every bar."""
    rng = np.random.default_rng(seed)
    out = {}
    for m, ticks in TICKS.items():
        for model in comet_fig.MODELS:
            r = {name: float(rng.uniform(0.35, 0.95) * ticks[-1]) for name in comet_fig.COLOURS}
            r["Attention"] = float(rng.uniform(0.1, 0.3) * ticks[-1])
            out[(model, m)] = r
    return out


def _draw(path, truth):
    """2 x 4 panels like the published figure; the (TP, EP) = (1, 8) ones (first of each row) carry bars."""
    fig, axes = plt.subplots(2, 4, figsize=(15.2, 6.1), dpi=100)
    for row, m in enumerate(TICKS):
        for ax in axes[row]:
            for sp in ax.spines.values():
                sp.set_linewidth(1.5)
            ax.tick_params(axis="y", length=6, width=1.5)
            ax.set_xticks([])
            ax.set_yticks(TICKS[m])
            ax.set_ylim(0, TICKS[m][-1] * 1.1)
            ax.set_xlim(-0.6, 2.6)
        ax = axes[row][0]
        for g, model in enumerate(comet_fig.MODELS):
            r = truth[(model, m)]
            for i, (name, rgb) in enumerate(comet_fig.COLOURS.items()):
                ax.bar(g + (i - 2) * 0.16, r[name], width=0.14, color=np.array(rgb) / 255, linewidth=0)
            ax.bar(g, r["Attention"], width=0.82, color=(0.3, 0.3, 0.3, 0.35), hatch="/", edgecolor="black",
                   linewidth=0)
    fig.savefig(path)
    plt.close(fig)


def test_known_bars_are_read_back_within_a_pixel(tmp_path):
    truth = _truth(1)
    png = tmp_path / "fig.png"
    _draw(png, truth)
    img = load_rgb(png)
    frames = find_frames(img)
    assert len(frames) == 8
    assert len(tick_rows(img, frames[0])) == 5
    upp = read_panel(img, frames[0], TICKS[4096], comet_fig.COLOURS)["units_per_px"]
    got = comet_fig.read_figure(png)
    assert set(got) == set(truth)
    for key, r in truth.items():
        tol = 1.5 * upp * (2 if key[1] == 8192 else 1)
        for name, v in r.items():
            assert got[key][name] == pytest.approx(v, abs=tol), (key, name)


def test_bad_images_are_named(tmp_path):
    blank = tmp_path / "blank.png"
    plt.imsave(blank, np.ones((50, 80, 3)))
    with pytest.raises(ValueError, match="no axes frame"):
        find_frames(load_rgb(blank))
    png = tmp_path / "fig.png"
    _draw(png, _truth(2))
    img = load_rgb(png)
    with pytest.raises(ValueError, match="found 5 y ticks.*3 tick values"):
        read_panel(img, find_frames(img)[0], (0, 100, 200), comet_fig.COLOURS)
    assert comet_fig.main([]) == 2

"""`gradcli demo swish --plot`: Swish and its derivative for several β."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gradcli.plot.swish import BETAS, betas_for, swish_curves

pytest.importorskip("matplotlib")


def test_curves_are_the_function_and_its_exact_derivative():
    curves = swish_curves([0.5, 2.0])
    for curve in curves:
        x = torch.tensor(curve.x)
        s = torch.sigmoid(curve.beta * x)
        assert np.allclose(curve.f, (x * s).numpy(), rtol=1e-14, atol=1e-300)
        by_hand = (s + curve.beta * x * s * (1 - s)).numpy()  # d/dx x·σ(βx)
        assert np.allclose(curve.exact, by_hand, rtol=1e-12, atol=1e-15)
        assert curve.max_abs_err < 1e-12
        assert curve.x[0] == -6.0 and curve.x[-1] == 6.0 and curve.x.size == 601


def test_the_demo_beta_is_drawn_too():
    assert betas_for(1.5) == sorted([*BETAS, 1.5])
    assert betas_for(1.0) == list(BETAS)


def test_demo_swish_plot(cli, tmp_path):
    out = tmp_path / "swish.png"
    result = cli("demo", "swish", "--beta", "1.5", "--plot", str(out))
    assert result.exit_code == 0, result.stderr
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 30_000
    assert result.stdout.rstrip().endswith(f"picture written to {out}")


def test_plot_belongs_to_swish_and_is_checked_first(cli, tmp_path):
    other = cli("demo", "graph", "--plot", str(tmp_path / "g.png"))
    assert other.exit_code == 2 and "--plot belongs to `gradcli demo swish`" in other.stderr
    bad = cli("demo", "swish", "--plot", str(tmp_path / "s.gif"))
    assert bad.exit_code == 2 and ".png, .svg or .pdf" in bad.stderr
    assert bad.stdout == ""  # refused before the demo ran

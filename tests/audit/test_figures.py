"""The report's and notebooks' figures (`audit.reporting.figures`): PNG bytes drawn on figures of
their own, leaving the caller's matplotlib backend and pyplot figures as they were."""

import matplotlib
import matplotlib.pyplot as plt
import numpy as np

from audit.reporting import figures

PNG = b"\x89PNG\r\n\x1a\n"


def test_figures_leave_the_callers_backend_and_pyplot_alone():
    before = matplotlib.get_backend()
    matplotlib.use("svg")  # a backend of the caller's that is not Agg (a notebook's is its inline one)
    try:
        open_figures = plt.get_fignums()
        roc = figures.roc_png({"loss": (np.array([1.0, 2.0]), np.array([0.0, 1.5]))}, title="t")
        grid = figures.image_grid_png(np.zeros((2, 1, 4, 4)), ["a", "b"])
        assert roc.startswith(PNG) and grid.startswith(PNG)
        assert matplotlib.get_backend() == "svg" and plt.get_fignums() == open_figures
    finally:
        matplotlib.use(before)

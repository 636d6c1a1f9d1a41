"""The plot modules leave matplotlib to the first plot drawn: a process that draws none (a
code server, the daemon, a sensor, a fork server) does not import it."""

import subprocess
import sys

from tests.conftest import PROJECT_ROOT

CHECK = """
import sys
import joulehouse.geopm.plots, joulehouse.plots
print("matplotlib" in sys.modules)
png = joulehouse.plots.scatter_png([joulehouse.plots.Series("a", [1.0], [2.0])], title="t",
                                   x_label="x", y_label="y")
print("matplotlib" in sys.modules, png[:8] == b"\\x89PNG\\r\\n\\x1a\\n")
"""


def test_matplotlib_is_imported_by_the_first_plot_drawn():
    done = subprocess.run([sys.executable, "-c", CHECK], cwd=PROJECT_ROOT, check=True,
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.split("\n")[:2] == ["False", "True True"]

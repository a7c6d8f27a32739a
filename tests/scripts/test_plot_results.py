#!/usr/bin/env python3
"""scripts/plot_results.py on a fake run folder: charts named <module>_<name>.png, exit codes.

Plain unittest. Exits 77 (CTest SKIP_RETURN_CODE) when no interpreter here has matplotlib, so
the chart checks show as skipped rather than passed.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "scripts", "plot_results.py")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def interpreter_has_matplotlib(python):
    if not os.access(python, os.X_OK):
        return False
    probe = subprocess.run([python, "-c", "import matplotlib"], capture_output=True)
    return probe.returncode == 0


# The script falls back to the system interpreter on its own, so either one will do.
HAVE_MATPLOTLIB = interpreter_has_matplotlib(sys.executable) or interpreter_has_matplotlib(
    "/usr/bin/python3")


def run_script(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          timeout=300)


def fake_report(module):
    """A report with the parts the script reads: a byte sweep, a plain sweep, two matrices."""
    gib = 1 << 30
    sizes = [1 << 20 << i for i in range(12)]  # 1M .. 2G
    return {
        "schema": "gpubench.result/1",
        "module": module,
        "version": "0.1.0+test",
        "run_id": "test_20250101_000000",
        "headline": {"p2p_unidir_ce_GBps": {"value": 391.5, "unit": "GB/s"}},
        "results": [],
        "matrices": [
            {"name": "p2p_unidir_ce_GBps", "title": "P2P unidirectional, copy engine (GB/s)",
             "unit": "GB/s", "row_label": "src", "col_label": "dst",
             "rows": ["GPU0", "GPU1", "GPU2"], "cols": ["GPU0", "GPU1", "GPU2"],
             "values": [[None, 391.2, 390.8], [392.0, None, 389.9], [390.1, 391.7, None]]},
            {"name": "all_null", "title": "nothing measured", "unit": "us",
             "rows": ["a"], "cols": ["b"], "values": [[None]]},
        ],
        "sweeps": [
            {"name": "p2p_size_sweep", "title": "P2P bandwidth over size", "x_label": "size",
             "x_unit": "bytes", "y_label": "bandwidth", "y_unit": "GB/s", "log_x": True,
             "series": [
                 {"label": "NVLink", "x": sizes, "y": [min(390.0, s / gib * 200) for s in sizes]},
                 {"label": "PCIe", "x": sizes, "y": [None] + [50.0] * (len(sizes) - 1)},
             ]},
            {"name": "seqlen_sweep", "title": "tokens per second", "x_label": "sequence length",
             "x_unit": "tokens", "y_label": "throughput", "y_unit": "tok/s", "log_x": True,
             "series": [{"label": "", "x": [128, 256, 512, 1024], "y": [10, 20, 30, 35]}]},
        ],
        "status": "ok",
    }


class PlotResultsTest(unittest.TestCase):
    def setUp(self):
        self.temp = tempfile.TemporaryDirectory()
        self.run_dir = self.temp.name

    def tearDown(self):
        self.temp.cleanup()

    def write(self, name, content):
        with open(os.path.join(self.run_dir, name), "w", encoding="utf-8") as handle:
            handle.write(content if isinstance(content, str) else json.dumps(content))

    def test_missing_run_dir_exits_2_with_one_line(self):
        result = run_script(os.path.join(self.run_dir, "does_not_exist"))
        self.assertEqual(result.returncode, 2)
        self.assertEqual(len(result.stderr.strip().splitlines()), 1)
        self.assertIn("not found", result.stderr)

    def test_folder_without_reports_is_fine(self):
        self.write("notes.json", {"schema": "something/else", "sweeps": [{"name": "x"}]})
        self.write("broken.json", "{ not json")
        result = run_script(self.run_dir)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.run_dir, "charts")))

    @unittest.skipUnless(HAVE_MATPLOTLIB, "matplotlib is not installed")
    def test_every_sweep_and_matrix_becomes_a_png(self):
        self.write("bandwidth.json", fake_report("bandwidth"))
        self.write("bandwidth.md", "# gpubench bandwidth\n\n## P2P bandwidth over size\n\n"
                   "<!-- chart: charts/bandwidth_p2p_size_sweep.png -->\n\n")
        self.write("other.json", {"schema": "other/1", "module": "other",
                                  "sweeps": [{"name": "ignored", "series": []}]})
        result = run_script(self.run_dir)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        charts = os.path.join(self.run_dir, "charts")
        expected = ["bandwidth_p2p_size_sweep.png", "bandwidth_seqlen_sweep.png",
                    "bandwidth_p2p_unidir_ce_GBps.png", "bandwidth_all_null.png"]
        self.assertEqual(sorted(os.listdir(charts)), sorted(expected))
        for name in expected:
            with open(os.path.join(charts, name), "rb") as handle:
                self.assertEqual(handle.read(8), PNG_MAGIC, name)
        # The Markdown's chart slot became a link to the drawn file; other text is kept.
        with open(os.path.join(self.run_dir, "bandwidth.md"), encoding="utf-8") as handle:
            md = handle.read()
        self.assertIn("![P2P bandwidth over size](charts/bandwidth_p2p_size_sweep.png)", md)
        self.assertIn("# gpubench bandwidth", md)
        self.assertNotIn("<!-- chart: charts/bandwidth_p2p_size_sweep.png -->", md)

        # A second run over the same folder replaces the charts (idempotent).
        again = run_script(self.run_dir)
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertEqual(sorted(os.listdir(charts)), sorted(expected))

    @unittest.skipIf(HAVE_MATPLOTLIB, "matplotlib is installed")
    def test_without_matplotlib_exits_0_with_a_note(self):
        self.write("bandwidth.json", fake_report("bandwidth"))
        result = run_script(self.run_dir)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("matplotlib", result.stdout)


if __name__ == "__main__":
    outcome = unittest.main(exit=False).result
    if not outcome.wasSuccessful():
        sys.exit(1)
    sys.exit(0 if HAVE_MATPLOTLIB else 77)

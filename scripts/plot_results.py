#!/usr/bin/env python3
"""Turns a gpubench run folder into PNG charts: every sweep as a line chart, every matrix as a heatmap.

Usage: python3 scripts/plot_results.py RUN_DIR

Reads every *.json report of schema gpubench.result/1 in RUN_DIR (other JSON files are skipped)
and writes RUN_DIR/charts/<module>_<name>.png, then links each one from its Markdown report
(which marks where each chart goes and links none until it is drawn).
Charts are an extra: when matplotlib is missing this prints one line and exits 0, so a
benchmark run never fails because of them. Exit 2 when RUN_DIR is missing, 1 when a chart
could not be drawn.
"""

import json
import math
import os
import re
import sys
import tempfile

SCHEMA = "gpubench.result/1"
BYTE_UNITS = {"bytes", "byte", "b"}
# Debian's python3-matplotlib lives beside the system interpreter; another python3 first on
# PATH (a virtualenv, pyenv) does not see it, so the system interpreter is tried before giving up.
SYSTEM_PYTHON = "/usr/bin/python3"
REEXEC_MARK = "GPUBENCH_PLOT_REEXEC"


def fail_input(message):
    print(f"plot_results: {message}", file=sys.stderr)
    sys.exit(2)


def import_matplotlib():
    """Returns (Figure, colors) with the Agg backend, or None when matplotlib cannot be imported."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import colors
        from matplotlib.figure import Figure

        return Figure, colors
    except ImportError:
        return None


def reexec_with_system_python():
    """Runs this script again under the system interpreter when that one may have matplotlib."""
    if os.environ.get(REEXEC_MARK) or not os.access(SYSTEM_PYTHON, os.X_OK):
        return
    try:
        if os.path.samefile(sys.executable, SYSTEM_PYTHON):
            return
    except OSError:
        pass
    os.environ[REEXEC_MARK] = "1"
    sys.stdout.flush()
    os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])


def safe_name(text):
    """Report names are already file-safe ids; this only guards against a stray character."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(text)) or "unnamed"


def as_float(value):
    """JSON number -> float; null, strings and the like -> NaN (drawn as a gap or a grey cell)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def short_bytes(value):
    """1024 -> '1K', 64 MiB -> '64M', 2 GiB -> '2G', 1.5 GiB -> '1.5G' (binary units)."""
    for suffix, scale in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if value >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.0f}B"


def short_number(value):
    """Compact tick label for a plain (non-byte) axis: 128, 4096, 1.5e+06."""
    if value == int(value) and abs(value) < 1e6:
        return str(int(value))
    return f"{value:.3g}"


def cell_text(value):
    """Heatmap annotation: about three significant digits, no exponent for usual magnitudes."""
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 0.01 or magnitude == 0:
        return f"{value:.2f}"
    return f"{value:.1e}"


def axis_label(label, unit):
    label = label or ""
    return f"{label} ({unit})" if unit else label


def power_of_two_ticks(lo, hi, max_ticks=12):
    """Powers of two spanning [lo, hi], thinned to at most max_ticks."""
    first = math.floor(math.log2(lo))
    last = math.ceil(math.log2(hi))
    count = last - first + 1
    step = max(1, math.ceil(count / max_ticks))
    return [2.0**e for e in range(first, last + 1, step)]


def is_power_of_two(value):
    return value > 0 and math.isclose(2.0 ** round(math.log2(value)), value, rel_tol=1e-9)


def plot_sweep(figure_cls, module, sweep, path):
    from matplotlib import ticker

    series_list = [s for s in sweep.get("series") or [] if isinstance(s, dict)]
    x_unit = str(sweep.get("x_unit") or "")
    log_x = bool(sweep.get("log_x", True))
    is_bytes = x_unit.lower() in BYTE_UNITS

    fig = figure_cls(figsize=(8, 5), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    all_x = []
    drawn, labelled = 0, False
    for series in series_list:
        xs = [as_float(v) for v in series.get("x") or []]
        ys = [as_float(v) for v in series.get("y") or []]
        points = [(x, y) for x, y in zip(xs, ys) if not math.isnan(x) and (x > 0 or not log_x)]
        if not points:
            continue
        points.sort()
        all_x.extend(x for x, _ in points)
        labelled = labelled or bool(series.get("label"))
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3,
                linewidth=1.5, label=str(series.get("label") or f"series {drawn + 1}"))
        drawn += 1

    if log_x and all_x:
        lo, hi = min(all_x), max(all_x)
        if is_bytes or all(is_power_of_two(x) for x in all_x):
            ax.set_xscale("log", base=2)
            ticks = [t for t in power_of_two_ticks(lo, hi) if lo / 1.5 <= t <= hi * 1.5] or [lo]
            ax.xaxis.set_major_locator(ticker.FixedLocator(ticks))
            ax.xaxis.set_minor_locator(ticker.NullLocator())
        else:
            ax.set_xscale("log")
    if is_bytes:
        ax.xaxis.set_major_formatter(
            ticker.FuncFormatter(lambda v, _: short_bytes(v) if v > 0 else "0"))
    elif log_x and all_x and ax.get_xscale() == "log":
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: short_number(v)))

    ax.set_title(str(sweep.get("title") or sweep.get("name") or ""), fontsize=11)
    ax.set_xlabel(axis_label(sweep.get("x_label"), "" if is_bytes else x_unit))
    ax.set_ylabel(axis_label(sweep.get("y_label"), sweep.get("y_unit")))
    ax.grid(True, which="major", alpha=0.35)
    ax.set_ylim(bottom=0)
    if drawn == 0:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    elif drawn > 1 or labelled:
        ax.legend(fontsize=8, loc="best")
    fig.text(0.99, 0.01, f"gpubench {module}", ha="right", va="bottom", fontsize=7, alpha=0.6)
    fig.tight_layout()
    save_figure(fig, path)


def matrix_values(matrix):
    """The matrix as a list of equal-length rows of floats (NaN for null or missing cells)."""
    rows = [str(r) for r in matrix.get("rows") or []]
    cols = [str(c) for c in matrix.get("cols") or []]
    raw = matrix.get("values") or []
    n_rows = max(len(rows), len(raw))
    n_cols = max([len(cols)] + [len(r) for r in raw if isinstance(r, list)])
    values = []
    for i in range(n_rows):
        row = raw[i] if i < len(raw) and isinstance(raw[i], list) else []
        values.append([as_float(row[j]) if j < len(row) else math.nan for j in range(n_cols)])
    rows += [str(i) for i in range(len(rows), n_rows)]
    cols += [str(j) for j in range(len(cols), n_cols)]
    return rows, cols, values


def plot_matrix(figure_cls, colors, module, matrix, path):
    import numpy as np

    rows, cols, values = matrix_values(matrix)
    data = np.ma.masked_invalid(np.array(values, dtype=float).reshape(len(rows), len(cols)))
    finite = data.compressed()
    vmin, vmax = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    # Bandwidths and latencies are >= 0: a scale from 0 keeps a 0.5% spread from looking like a
    # weak link, while a real outlier (PCIe beside NVLink) still stands out.
    vmin = min(vmin, 0.0)
    if vmin == vmax:
        vmin, vmax = vmin - 0.5 * abs(vmin or 1), vmax + 0.5 * abs(vmax or 1)

    cell = 0.75 if max(len(rows), len(cols)) <= 8 else 0.5
    width = min(24, max(5.5, 2.5 + cell * len(cols)))
    height = min(20, max(4.5, 1.8 + cell * len(rows)))
    fig = figure_cls(figsize=(width, height), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    cmap = _colormap("viridis").copy()
    cmap.set_bad("#d0d0d0")
    norm = colors.Normalize(vmin=vmin, vmax=vmax)
    image = ax.imshow(data, cmap=cmap, norm=norm, aspect="auto", interpolation="nearest")
    bar = fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    bar.set_label(str(matrix.get("unit") or ""))

    ax.set_xticks(range(len(cols)))
    ax.set_xticklabels(cols, rotation=45 if max((len(c) for c in cols), default=0) > 4 else 0,
                       ha="right" if max((len(c) for c in cols), default=0) > 4 else "center")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows)
    ax.set_xlabel(str(matrix.get("col_label") or ""))
    ax.set_ylabel(str(matrix.get("row_label") or ""))
    ax.set_title(str(matrix.get("title") or matrix.get("name") or ""), fontsize=11)

    if len(rows) * len(cols) <= 32 * 32:
        font = 9 if max(len(rows), len(cols)) <= 8 else 6
        for i in range(len(rows)):
            for j in range(len(cols)):
                value = values[i][j]
                if math.isnan(value):
                    ax.text(j, i, "-", ha="center", va="center", fontsize=font, color="#555555")
                    continue
                red, green, blue, _ = cmap(norm(value))
                luminance = 0.299 * red + 0.587 * green + 0.114 * blue
                ax.text(j, i, cell_text(value), ha="center", va="center", fontsize=font,
                        color="black" if luminance > 0.5 else "white")
    fig.text(0.99, 0.01, f"gpubench {module}", ha="right", va="bottom", fontsize=7, alpha=0.6)
    fig.tight_layout()
    save_figure(fig, path)


def _colormap(name):
    import matplotlib

    try:
        return matplotlib.colormaps[name]
    except AttributeError:  # matplotlib < 3.5
        from matplotlib import cm

        return cm.get_cmap(name)


def save_figure(fig, path):
    """Writes the PNG atomically so a reader never sees half a chart."""
    folder = os.path.dirname(path)
    handle, temp = tempfile.mkstemp(prefix=".tmp_", suffix=".png", dir=folder)
    os.close(handle)
    try:
        fig.savefig(temp, format="png")
        os.replace(temp, path)
    finally:
        if os.path.exists(temp):
            os.unlink(temp)


def load_reports(run_dir):
    """(file name, report) for every gpubench.result/1 JSON file in run_dir, sorted by name."""
    reports = []
    for entry in sorted(os.listdir(run_dir)):
        path = os.path.join(run_dir, entry)
        if not entry.endswith(".json") or not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8") as handle:
                report = json.load(handle)
        except (OSError, ValueError):
            continue  # not a report (or not readable): nothing to chart
        if isinstance(report, dict) and report.get("schema") == SCHEMA:
            reports.append((entry, report))
    return reports


def link_charts(run_dir, entry, drawn):
    """Replaces each chart slot of the report's Markdown (<!-- chart: charts/NAME.png -->) whose
    chart was drawn with its image link: the Markdown links only files that exist."""
    md_path = os.path.join(run_dir, os.path.splitext(entry)[0] + ".md")
    try:
        with open(md_path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        return
    changed = text
    for name, title in drawn:
        changed = changed.replace(f"<!-- chart: charts/{name} -->",
                                  f"![{title}](charts/{name})")
    if changed == text:
        return
    handle, temp = tempfile.mkstemp(prefix=".tmp_", suffix=".md", dir=run_dir)
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(changed)
    os.chmod(temp, os.stat(md_path).st_mode & 0o777)
    os.replace(temp, md_path)


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print("usage: plot_results.py RUN_DIR", file=sys.stderr if len(argv) != 2 else sys.stdout)
        return 0 if len(argv) == 2 else 2
    run_dir = argv[1]
    if not os.path.isdir(run_dir):
        fail_input(f"run folder not found: {run_dir}")

    reports = load_reports(run_dir)
    jobs = []
    for entry, report in reports:
        module = safe_name(report.get("module") or os.path.splitext(entry)[0])
        for sweep in report.get("sweeps") or []:
            if isinstance(sweep, dict):
                jobs.append(("sweep", entry, module, sweep))
        for matrix in report.get("matrices") or []:
            if isinstance(matrix, dict):
                jobs.append(("matrix", entry, module, matrix))
    if not jobs:
        print(f"plot_results: nothing to chart in {run_dir} "
              f"({len(reports)} gpubench report(s), no sweeps or matrices)")
        return 0

    imported = import_matplotlib()
    if imported is None:
        reexec_with_system_python()
        print("plot_results: matplotlib not installed (apt-get install python3-matplotlib); "
              "no charts written")
        return 0
    figure_cls, colors = imported

    charts_dir = os.path.join(run_dir, "charts")
    try:
        os.makedirs(charts_dir, exist_ok=True)
    except OSError as error:
        fail_input(f"cannot create {charts_dir}: {error.strerror}")
    written, failed = 0, 0
    drawn = {}  # report file -> [(chart file, title)]
    for kind, entry, module, item in jobs:
        name = f"{module}_{safe_name(item.get('name'))}.png"
        path = os.path.join(charts_dir, name)
        try:
            if kind == "sweep":
                plot_sweep(figure_cls, module, item, path)
            else:
                plot_matrix(figure_cls, colors, module, item, path)
            written += 1
            drawn.setdefault(entry, []).append((name, item.get("title") or name))
        except Exception as error:  # one bad chart must not stop the others
            failed += 1
            print(f"plot_results: could not draw {name}: {error}", file=sys.stderr)
    for entry, charts in drawn.items():
        try:
            link_charts(run_dir, entry, charts)
        except OSError as error:
            print(f"plot_results: could not link the charts in {entry}: {error}", file=sys.stderr)
    print(f"plot_results: wrote {written} chart(s) to {charts_dir}"
          + (f", {failed} failed" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

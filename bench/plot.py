"""Charts of the curves `make bench` measures and of `make soak`'s
series, as SVG with matplotlib (report.py calls it)."""
import collections
import json
import os

import matplotlib

matplotlib.use("svg")  # no display: files only
import matplotlib.pyplot as plt  # noqa: E402

matplotlib.rcParams["svg.hashsalt"] = "strata"  # the same figures draw the same file
matplotlib.rcParams["svg.fonttype"] = "none"

TITLES = {
    "partitions-throughput": "Produce and consume through strata serve, by partitions (1 KiB records)",
    "partitions-latency": "Produce p99 at a fixed rate, by partitions",
    "partitions-rss": "strata serve's peak resident memory, by partitions",
    "partitions-create": "Creating the topic, by partitions",
    "partitions-fsyncs": "Engine fsyncs per 1,000 records at the p99 rate, by partitions",
    "history-cold-read": "Cold point read (empty cache, MinIO), by history kept",
    "history-size": "Catalog and bucket manifest size, by history kept",
    "history-rebuild": "Catalog rebuild from the bucket, by objects",
    "record-size": "Engine append and Parquet conversion, by record size",
    "iceberg-metadata": "A topic's Iceberg table metadata, by commits (retention, expiry)",
}


def _short(v):
    for unit, n in (("Mi", 1 << 20), ("Ki", 1 << 10)):
        if v >= n and v % n == 0:
            return f"{v // n:g}{unit}"
    return f"{v:,.0f}" if v >= 1000 else f"{v:g}"


def _val(v):
    if abs(v) >= 1e6:
        return f"{v / 1e6:.3g}M"
    if abs(v) >= 1e4:
        return f"{v / 1e3:.3g}k"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.3g}"


def curves(figures, out_dir):
    """Draws one chart per curve named in figures; returns the paths."""
    by_curve = collections.OrderedDict()
    for f in figures:
        if f.get("curve"):
            by_curve.setdefault(f["curve"], collections.OrderedDict()).setdefault(f.get("series") or f["name"], []).append(f)
    paths = []
    for curve, series in by_curve.items():
        os.makedirs(out_dir, exist_ok=True)
        fig, ax = plt.subplots(figsize=(8, 4.5))
        units, xunit, values = set(), "", []
        for i, (label, pts) in enumerate(series.items()):
            pts = sorted(pts, key=lambda f: f["x"])
            xs, ys = [f["x"] for f in pts], [f["value"] for f in pts]
            refs = [f["reference_value"] for f in pts]
            color = f"C{i}"
            ax.plot(xs, ys, marker="o", color=color, label=label)
            for x, y, f in zip(xs, ys, pts):
                ax.annotate(_val(y), (x, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7, color=color)
            # A reference that is not just the curve's own first point (the
            # disk, zstd alone, a plain listing) is drawn dashed beside it.
            if any(abs(r - ys[0]) > 1e-9 * max(1.0, abs(ys[0])) for r in refs):
                ax.plot(xs, refs, linestyle="--", color=color, alpha=0.6, label=f"reference ({pts[0]['reference'].split(',')[0]})")
                values += refs
            units.add(pts[0]["unit"])
            xunit = pts[0].get("x_unit", "")
            values += ys
        ax.set_xscale("log")
        xs = sorted({f["x"] for pts in series.values() for f in pts})
        ax.set_xticks(xs, [_short(x) for x in xs])
        ax.minorticks_off()
        positive = [v for v in values if v > 0]
        if positive and max(positive) / min(positive) > 50:
            ax.set_yscale("log")
        ax.set_xlabel(xunit)
        ax.set_ylabel(" / ".join(sorted(units)))
        ax.set_title(TITLES.get(curve, curve), fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = os.path.join(out_dir, f"{curve}.svg")
        fig.savefig(path, metadata={"Date": None})
        plt.close(fig)
        paths.append(path)
    return paths


def soak(series_path, out_dir):
    """Draws make soak's p99 and RSS over time; returns the paths."""
    rows = [json.loads(l) for l in open(series_path) if l.strip()]
    os.makedirs(out_dir, exist_ok=True)
    minutes = [r["t"] / 60 for r in rows]
    # TestSoak's verdict, drawn into the title: the median RSS of the last
    # fifth of the windows beside that of the second (the first is warm-up).
    fifth = max(1, len(rows) // 5)

    def median(xs):
        xs = sorted(xs)
        return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2

    early = median([r["rss_mib"] for r in rows[fifth:2 * fifth]])
    late = median([r["rss_mib"] for r in rows[-fifth:]])
    verdict = f"{'grew' if late > early * 1.10 else 'did not grow'}: {late:.0f} MiB in the last fifth, {early:.0f} in the second"
    paths = []
    for key, label, title in (("p99_ms", "produce p99 (ms)", "Soak: produce p99 in each window"),
                              ("rss_mib", "strata serve RSS (MiB)", f"Soak: strata serve's resident memory ({verdict})")):
        fig, ax = plt.subplots(figsize=(8, 4))
        ax.plot(minutes, [r[key] for r in rows], color="C0")
        for r in rows:
            if r.get("tiering_run"):
                ax.axvline(r["t"] / 60, color="C1", alpha=0.15)
        ax.set_xlabel("minutes (orange: a tiering run finished)")
        ax.set_ylabel(label)
        ax.set_title(title, fontsize=10)
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        path = os.path.join(out_dir, f"soak-{key.split('_')[0]}.svg")
        fig.savefig(path, metadata={"Date": None})
        plt.close(fig)
        paths.append(path)
    return paths

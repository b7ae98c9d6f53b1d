"""``compare-bags --report R.html``: one self-contained HTML file (no script, no network: plots as inline
SVG drawn by matplotlib, image crops as base64 PNG) for a reviewer of a regression run.

Sections: the verdict and tolerances; a table per bag (messages, differences over tolerance by kind); the
plots (differences over tolerance per bag and kind, the score deltas of every matched detection /
classification / person, a timeline of the differences per bag); crops of the worst differences, cut from
the input frames (``Crop``: the caller reads them); the first differences listed.
"""

from __future__ import annotations

import base64
import html
import io
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from libredgetpu_ros.compare.messages import Difference
from libredgetpu_ros.compare.runs import Comparison

# Worst first: an appearance or loss, a changed class, then the size of the change.
SEVERITY = {"bag_added": 9, "bag_lost": 9, "message_added": 8, "message_lost": 8, "detection_added": 7,
            "detection_lost": 7, "pose_added": 7, "pose_lost": 7, "class_changed": 6, "top1_changed": 6,
            "class_added": 5, "class_lost": 5,
            "mask_agreement": 5, "oks": 5, "keypoint_distance": 4, "box_moved": 4, "score_delta": 3}


@dataclass
class Crop:
    difference: Difference
    rgb: np.ndarray  # the crop, HxWx3 uint8, the difference's box drawn on it


def worst(differences: list[Difference], n: int) -> list[Difference]:
    """The ``n`` worst differences over tolerance (one per frame, topic and box)."""
    def key(d: Difference) -> tuple[int, float]:
        value = 1.0 - d.value if d.kind in ("mask_agreement", "oks") else abs(d.value)
        return SEVERITY.get(d.kind, 2), value

    seen: set[tuple[str, str, int, tuple[float, ...] | None]] = set()
    out = []
    for d in sorted((d for d in differences if d.exceeds), key=key, reverse=True):
        where = (d.bag, d.topic, d.timestamp, d.box)
        if where not in seen and d.kind not in ("bag_added", "bag_lost"):
            seen.add(where)
            out.append(d)
        if len(out) == n:
            break
    return out


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prologue and DOCTYPE: inline in HTML


def _figure(width: float, height: float) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"  # text as text: smaller, searchable
    return plt.subplots(figsize=(width, height))


def _close(fig: Any) -> None:
    import matplotlib.pyplot as plt

    plt.close(fig)


def counts_plot(comparison: Comparison) -> str:
    names = [b.name for b in comparison.bags]
    kinds = sorted({k for b in comparison.bags for k in b.counts(True)})
    fig, ax = _figure(8, 0.4 * len(names) + 1.5)
    left = np.zeros(len(names))
    for kind in kinds:
        values = np.array([b.counts(True).get(kind, 0) for b in comparison.bags], float)
        ax.barh(names, values, left=left, label=kind)
        left += values
    ax.set_xlabel("differences over tolerance")
    ax.set_title("Changes per bag")
    ax.invert_yaxis()
    if kinds:
        ax.legend(fontsize=8, loc="lower right")
    try:
        return _svg(fig)
    finally:
        _close(fig)


def histogram_plot(comparison: Comparison) -> str:
    deltas = np.array([d for b in comparison.bags for d in b.score_deltas], float)
    fig, ax = _figure(8, 3)
    if deltas.size:
        ax.hist(deltas, bins=50)
    tol = comparison.tolerances.score_tol
    for x in (-tol, tol):
        ax.axvline(x, color="red", linestyle="--", linewidth=1)
    ax.set_xlabel("score delta (candidate - baseline), matched results; dashed: tolerance")
    ax.set_ylabel("count")
    ax.set_title(f"Score deltas ({deltas.size} matched results)")
    try:
        return _svg(fig)
    finally:
        _close(fig)


def timeline_plot(comparison: Comparison) -> str:
    bags = comparison.bags
    fig, ax = _figure(8, 0.4 * len(bags) + 1.5)
    kinds = sorted({d.kind for b in bags for d in b.differences if d.exceeds and d.timestamp})
    for kind in kinds:
        xs, ys = [], []
        for row, b in enumerate(bags):
            for d in b.differences:
                if d.exceeds and d.kind == kind and d.timestamp:
                    xs.append((d.timestamp - b.first_ns) / 1e9)
                    ys.append(row)
        ax.scatter(xs, ys, s=12, label=kind)
    ax.set_yticks(range(len(bags)), [b.name for b in bags])
    ax.set_ylim(len(bags) - 0.5, -0.5)
    ax.set_xlabel("time in the bag (s)")
    ax.set_title("Differences over tolerance in time")
    if kinds:
        ax.legend(fontsize=8, loc="upper right")
    try:
        return _svg(fig)
    finally:
        _close(fig)


def _png(rgb: np.ndarray) -> str:
    import cv2

    ok, data = cv2.imencode(".png", np.ascontiguousarray(rgb[..., ::-1]))
    return base64.b64encode(data.tobytes()).decode("ascii") if ok else ""


def _table(rows: list[list[Any]], head: list[str]) -> str:
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{cells}</tr>{body}</table>"


STYLE = ("body{font-family:sans-serif;margin:2em;max-width:70em}table{border-collapse:collapse;margin:1em 0}"
         "td,th{border:1px solid #ccc;padding:2px 6px;font-size:90%;text-align:left}"
         ".changed{color:#b00}.same{color:#070}figure{display:inline-block;margin:4px}"
         "figcaption{font-size:80%;max-width:16em}")


def render(comparison: Comparison, crops: list[Crop], max_listed: int = 200) -> str:
    """The report as one HTML document."""
    doc = comparison.as_dict(max_listed)
    verdict = doc["verdict"]
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>compare-bags: {verdict}</title>"
             f"<style>{STYLE}</style></head><body>",
             f"<h1>compare-bags: <span class='{verdict}'>{verdict}</span></h1>",
             f"<p>baseline <code>{html.escape(doc['baseline'])}</code>, candidate "
             f"<code>{html.escape(doc['candidate'])}</code>; {doc['totals']['bags']} bags, "
             f"{doc['totals']['changed_bags']} changed, {doc['totals']['compared_messages']} messages "
             f"compared, {doc['totals']['exceeding']} differences over tolerance.</p>",
             "<h2>Tolerances</h2>", _table([[k, v] for k, v in doc["tolerances"].items()], ["", "value"]),
             "<h2>Bags</h2>",
             _table([[b["bag"], b["status"], b["messages"]["baseline"], b["messages"]["candidate"],
                      b["messages"]["compared"], ", ".join(f"{k}: {n}" for k, n in b["exceeding"].items())]
                     for b in doc["bags"]],
                    ["bag", "status", "baseline msgs", "candidate msgs", "compared", "over tolerance"]),
             "<h2>Plots</h2>", f"<div class='plot' id='counts'>{counts_plot(comparison)}</div>",
             f"<div class='plot' id='score-deltas'>{histogram_plot(comparison)}</div>",
             f"<div class='plot' id='timeline'>{timeline_plot(comparison)}</div>",
             "<h2>Worst differences</h2>"]
    if crops:
        for crop in crops:
            d = crop.difference
            parts.append(f"<figure class='crop'><img alt='{html.escape(d.kind)}' "
                         f"src='data:image/png;base64,{_png(crop.rgb)}'><figcaption>{html.escape(d.bag)} "
                         f"{html.escape(d.topic)} t={d.timestamp}: {html.escape(d.kind)} "
                         f"{html.escape(d.detail)}</figcaption></figure>")
    else:
        parts.append("<p>No crops: no difference over tolerance, or the input bags are not known (they are "
                     "read from the runs' summary.json).</p>")
    kinds = Counter(d["kind"] for d in doc["listed"])
    parts += [f"<h2>Differences over tolerance ({doc['listed_of']}; first {len(doc['listed'])} listed)</h2>",
              f"<p>{html.escape(', '.join(f'{k}: {n}' for k, n in sorted(kinds.items())))}</p>",
              _table([[d["bag"], d["topic"], d["timestamp"], d["kind"], f"{d['value']:.4g}", d["detail"]]
                      for d in doc["listed"]], ["bag", "topic", "timestamp", "kind", "value", "detail"]),
              "</body></html>"]
    return "\n".join(parts)

"""Inline SVG plots for the self-contained HTML reports (matplotlib, Agg): no script, nothing to fetch."""

from __future__ import annotations

import html
import io
import re
from typing import Any


def svg(fig: Any) -> str:
    """The figure as inline SVG; the figure is closed."""
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    # Drop the XML prolog and the RDF metadata block (creator, date, licence URIs): nothing to fetch, stable.
    return re.sub(r"<metadata>.*?</metadata>", "", text[text.index("<svg"):], flags=re.S)


def figure(cls: str, title: str, svg_text: str) -> str:
    return f'<figure class="plot {cls}"><figcaption>{html.escape(title)}</figcaption>{svg_text}</figure>'


def shade_faults(ax: Any, faults: list[dict[str, Any]]) -> None:
    """Each fault window as a red band; the first one labelled for the legend."""
    for i, f in enumerate(faults):
        ax.axvspan(f.get("start", 0), f.get("end", 0), color="tab:red", alpha=0.12,
                   label=f"fault: {f.get('fault')}" if i == 0 else None)

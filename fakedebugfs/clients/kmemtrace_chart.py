"""The fragmentation chart of ``kmemtrace-report --chart``: one horizontal
bar per call site (the largest by bytes allocated), its length the site's
fragmentation in percent.  SVG is written by hand; PNG needs matplotlib."""

from __future__ import annotations

from xml.sax.saxutils import escape

ROW, LABEL_W, BAR_W, PAD = 22, 300, 420, 16


def bars(an, syms, top: int):
    sites = sorted(an.sites.items(), key=lambda kv: (-kv[1].alloc, kv[0]))[:top]
    return [(syms(addr), u.frag, u.alloc) for addr, u in sites]


def write(path: str, an, syms, top: int = 20) -> None:
    rows = bars(an, syms, top)
    if path.lower().endswith(".svg"):
        with open(path, "w") as fp:
            fp.write(svg(rows))
    elif path.lower().endswith(".png"):
        png(path, rows)
    else:
        raise RuntimeError("the chart file must end in .svg or .png")


def svg(rows) -> str:
    width = LABEL_W + BAR_W + 80
    height = PAD * 3 + ROW * max(1, len(rows)) + 20
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="monospace" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{PAD}" y="{PAD + 4}" font-size="14">'
           'kmemtrace: internal fragmentation per call site (%)</text>']
    top = PAD * 2
    for i, (name, frag, alloc) in enumerate(rows):
        y = top + i * ROW
        w = BAR_W * min(frag, 100.0) / 100.0
        out.append(f'<text x="{LABEL_W - 6}" y="{y + 14}" text-anchor="end">{escape(name)}</text>')
        out.append(f'<rect x="{LABEL_W}" y="{y + 3}" width="{w:.1f}" height="{ROW - 6}" '
                   f'fill="#4a7ab5"><title>{escape(name)}: {frag:.2f}% of {alloc} bytes</title></rect>')
        out.append(f'<text x="{LABEL_W + w + 4:.1f}" y="{y + 14}">{frag:.1f}</text>')
    axis_y = top + len(rows) * ROW + 4
    out.append(f'<line x1="{LABEL_W}" y1="{top}" x2="{LABEL_W}" y2="{axis_y}" stroke="black"/>')
    for pct in (0, 25, 50, 75, 100):
        x = LABEL_W + BAR_W * pct / 100
        out.append(f'<text x="{x:.0f}" y="{axis_y + 14}" text-anchor="middle">{pct}</text>')
    out.append("</svg>\n")
    return "\n".join(out)


def png(path: str, rows) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("PNG charts need matplotlib (pip install matplotlib); "
                           "use a .svg file instead") from None
    fig, ax = plt.subplots(figsize=(9, 0.3 * max(1, len(rows)) + 1))
    ax.barh([r[0] for r in rows][::-1], [r[1] for r in rows][::-1], color="#4a7ab5")
    ax.set_xlabel("fragmentation (%)")
    ax.set_xlim(0, 100)
    ax.set_title("kmemtrace: internal fragmentation per call site")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)

"""MkDocs hook: formulas become MathML at build time, so the site shows them with no script and nothing fetched.

In a page, `$...$` is an inline formula and a `$$ ... $$` paragraph a displayed one (LaTeX, as pymdownx.arithmatex
reads it). Arithmatex (`generic: true` in mkdocs.yml) wraps each in a `<span class="arithmatex">` (or `<div>`)
holding `\\(...\\)` (or `\\[...\\]`); this hook replaces that by the MathML of latex2mathml, which every current
browser renders natively. A formula that latex2mathml cannot convert fails the build (the error names the page).
"""

from __future__ import annotations

import html
import re

from latex2mathml.converter import convert

_INLINE = re.compile(r'<span class="arithmatex">\\\((.*?)\\\)</span>', re.DOTALL)
_BLOCK = re.compile(r'<div class="arithmatex">\\\[(.*?)\\\]</div>', re.DOTALL)


def _to_mathml(tex: str, display: str, page) -> str:
    tex = html.unescape(tex).strip()
    try:
        mathml = convert(tex, display=display)
    except Exception as error:  # latex2mathml raises its own exception types (and a few plain ones)
        raise ValueError(f"{page.file.src_uri}: cannot convert the formula {tex!r} to MathML: {error}") from error
    # the source TeX stays as the alternative text (screen readers, copying)
    return mathml.replace("<math ", f'<math alttext="{html.escape(tex, quote=True)}" ', 1)


def on_page_content(html_text: str, page, config, files) -> str:
    html_text = _BLOCK.sub(lambda match: _to_mathml(match.group(1), "block", page), html_text)
    return _INLINE.sub(lambda match: _to_mathml(match.group(1), "inline", page), html_text)

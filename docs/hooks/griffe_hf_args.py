"""Griffe extension (mkdocs.yml, mkdocstrings' `extensions`): reads transformers-style argument lists as Google-style.

transformers' docstrings, and ours that follow them, write an argument as ``name (`int`, defaults to 512): text``.
Google-style parsing would take "`int`, defaults to 512" for the type and show it with its backquotes. This
extension rewrites such lines before parsing: a parenthesis that starts with a backquoted type is dropped (the type
and default come from the signature), and any other (a tensor shape, `(batch_size, seq_len)`) moves to the front of
the description. A docstring that is nothing but such a list (a `forward` documented the way transformers'
`auto_docstring` expects) gets its "Args:" heading. Only the rendered site changes; the source is left as it is.
"""

from __future__ import annotations

import re

import griffe

# an argument line of an Args section: indent, name, " (" ... "):" — the parenthesis may hold parentheses itself
_ARGUMENT = re.compile(r"^(?P<indent>[ \t]+)(?P<name>\*{0,2}\w+) \((?P<what>`.*?`[^:\n]*?)\):(?P<rest>.*)$", re.M)
_TYPE_FIRST = re.compile(r"^`[\w.\[\], |]+`(?:$|, )")  # `int`, `float | None`, `list[str]`, then maybe ", defaults to"


def _rewrite(match: re.Match) -> str:
    what = match["what"]
    if _TYPE_FIRST.match(what):
        return f"{match['indent']}{match['name']}:{match['rest']}"
    return f"{match['indent']}{match['name']}: {what}:{match['rest']}"


def rewrite_arguments(text: str) -> str:
    lines = text.split("\n")
    if _ARGUMENT.match("    " + lines[0]):  # starts with an argument line: an Args section alone
        # arguments go 4 deep; a continuation line 8 (griffe dedents a docstring whose text starts on the opening
        # line, `r"""name (...): text`, so that its continuation lines start at column 0 like the arguments)
        indented = [
            f"    {line}" if _ARGUMENT.match("    " + line) or line.startswith(" ") else f"        {line}"
            for line in lines
        ]
        text = "Args:\n" + "\n".join(line if line.strip() else "" for line in indented)
    return _ARGUMENT.sub(_rewrite, text)


class TransformersArguments(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        seen: set[int] = set()
        stack: list[griffe.Object] = [pkg]
        while stack:
            obj = stack.pop()
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if obj.docstring is not None:
                obj.docstring.value = rewrite_arguments(obj.docstring.value)
            stack.extend(member for member in obj.members.values() if not member.is_alias)

"""The front of every command line. An anticipated error, a `UsageError` (a bad flag value, a file or folder that is
not there, data or a model that cannot be used), ends the command with one line that names the problem, in
argparse's form (`pretrain.py: error: ...`), and exit status 2: no traceback. Any other exception keeps its
traceback. `SINUSOIDAL_ENCODER_DEBUG=1` in the environment shows the traceback of anticipated errors too. Ctrl-C
ends with one line as well (status 130): during training, where the newest checkpoint is and the command that
resumes (`Interrupted`, raised by the training loop)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

DEBUG_VARIABLE = "SINUSOIDAL_ENCODER_DEBUG"


class UsageError(ValueError):
    """A problem with what the user passed, whose message names the flag or path and what to do. A `ValueError`, so
    that code calling the library directly catches it as before."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during training, carrying the line that says where the newest checkpoint is and how to resume."""


def command(main: Callable[[], Any]) -> Callable[[], None]:
    """`main` (which reads `sys.argv`) as a console script behind the front: what `[project.scripts]`, the
    `training/*.py` wrappers and `python -m` call."""

    def entry() -> None:
        try:
            main()
        except UsageError as error:
            if os.environ.get(DEBUG_VARIABLE, "") not in ("", "0"):
                raise
            print(f"{os.path.basename(sys.argv[0])}: error: {error}", file=sys.stderr)
            raise SystemExit(2) from None
        except KeyboardInterrupt as interruption:
            if os.environ.get(DEBUG_VARIABLE, "") not in ("", "0"):
                raise
            print(f"{os.path.basename(sys.argv[0])}: {interruption or 'interrupted.'}", file=sys.stderr)
            raise SystemExit(130) from None

    entry.__doc__ = main.__doc__
    return entry

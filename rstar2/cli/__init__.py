"""The `rstar2` command. Thin: each verb parses its options and calls one library function.

One module per verb group registers itself on the shared app; importing them here is what
makes the verbs exist.
"""

from rstar2.cli.app import app
from rstar2.cli import sandbox  # noqa: F401  (registers `rstar2 sandbox ...`)
from rstar2.cli import data  # noqa: F401  (registers `rstar2 data ...`)
from rstar2.cli import eval  # noqa: F401  (registers `rstar2 eval` and `rstar2 eval compare`)
from rstar2.cli import grade  # noqa: F401
from rstar2.cli import chat  # noqa: F401  (registers `rstar2 chat` and `rstar2 serve-model`)
from rstar2.cli import train  # noqa: F401  (registers `rstar2 train`)
from rstar2.cli import sft  # noqa: F401  (registers `rstar2 sft`)
from rstar2.cli import demo  # noqa: F401  (registers `rstar2 demo`)
from rstar2.cli import view  # noqa: F401  (registers `rstar2 view`)
from rstar2.cli import publish  # noqa: F401  (registers `rstar2 publish`)


def main() -> None:
    app()

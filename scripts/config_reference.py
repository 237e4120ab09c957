"""Writes docs/config.md, the reference of every recipe field, from the config models.

    python scripts/config_reference.py            # rewrite docs/config.md
    python scripts/config_reference.py --check    # exit 1 when docs/config.md is stale

The page is `rstar2.section.reference` of the models a recipe is read into: the run config
(`rstar2 train`, `rstar2 demo`), the demo's `demo:` section, the GSM8K pipeline's `gsm8k:` section and the SFT run
(`rstar2 sft`). Nothing here names
a field, so a field added, moved, retyped or redocumented reaches the page when it is
regenerated; tests/docs/test_config_page.py fails until it is.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "config.md"
COMMAND = "python scripts/config_reference.py"

HEADER = f"""# Configuration reference

Every field a recipe (`recipes/*.yaml`) can set, with the values it takes, its default and what
it means; `--set dotted.path=VALUE` overrides any of them on the command line (`rstar2 train`,
`rstar2 demo`, `rstar2 sft`). A recipe states only what differs from the defaults, which are the paper's
values. How the fields play together: [training](training.md), [trainer](trainer.md),
[distributed](distributed.md), [fleet](fleet.md).

This page is generated from the configuration models' own descriptions
(`{COMMAND}`); edit those, not the page.
"""


def render_page() -> str:
    sys.path.insert(0, str(REPO))
    from rstar2.demo.gsm8k import GSM8KSettings
    from rstar2.demo.pipeline import DemoSettings
    from rstar2.run.config import RunConfig
    from rstar2.section import reference
    from rstar2.sft.config import SFTConfig

    run = reference(RunConfig, description="The run: its name, seed and where it writes.")
    demo = reference(DemoSettings, "demo.", DemoSettings.__doc__ or "")
    gsm8k = reference(GSM8KSettings, "gsm8k.", GSM8KSettings.__doc__ or "")
    sft = reference(SFTConfig, description="The SFT run: its name and where it writes ([sft](sft.md)).")
    return (f"{HEADER}\n{run}\n# The demo (`rstar2 demo`)\n\n{demo}\n# The GSM8K pipeline (`rstar2 demo --recipe gsm8k`)\n\n{gsm8k}\n"
            f"# The SFT run (`rstar2 sft`)\n\n{sft}").rstrip() + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that docs/config.md is current")
    args = parser.parse_args()
    page = render_page()
    if args.check:
        if PAGE.read_text() != page:
            sys.exit(f"{PAGE.relative_to(REPO)} is stale: regenerate it with `{COMMAND}`")
        return
    PAGE.write_text(page)
    print(f"wrote {PAGE.relative_to(REPO)}")


if __name__ == "__main__":
    main()

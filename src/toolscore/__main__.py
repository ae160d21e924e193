"""`python -m toolscore`, and the `toolscore` console script (`main`)."""

import sys

from toolscore._gc import hold


def main() -> int:
    """Run the `toolscore` command, the collector held while it starts (`toolscore._gc`)."""
    hold()  # before the command's first import
    from toolscore.cli import main as run

    return run()


if __name__ == "__main__":
    sys.exit(main())

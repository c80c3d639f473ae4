"""``python -m cli``: the same as the ``fleet`` command."""

from cli import main

main()

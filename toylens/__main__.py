"""`python -m toylens COMMAND [ARGS]`: the same commands as the `toylens` console script."""

from toylens.console import main

main()

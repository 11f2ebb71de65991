# `python -m tasks ...` is the user's command; the command layer (toylens.cli) serves it.
from toylens.cli import main

main()

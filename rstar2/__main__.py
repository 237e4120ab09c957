"""`python -m rstar2` is the `rstar2` command."""

from rstar2.launch import main

main()

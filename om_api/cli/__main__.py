"""``python -m om_api.cli``: the ``om`` command line."""

from om_api.cli import main

main()

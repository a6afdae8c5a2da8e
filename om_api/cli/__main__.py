"""``python -m om_api.cli``: the ``om`` command line."""

from om_api.cli.commands import app

app()

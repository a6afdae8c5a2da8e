"""The ``om`` command line (:mod:`om_api.cli.commands`), the embedded stack it runs
(:mod:`om_api.cli.stack`) and the demo (:mod:`om_api.cli.demo`)."""

from om_api.cli.commands import app

__all__ = ["app"]

"""The deployment in ``deploy/`` built and run for real with podman (``make test-containers``);
see ``__main__.py``. Plain ``pytest`` collects nothing here (``conftest.py``)."""

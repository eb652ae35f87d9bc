"""``python -m hyperscalees ...`` runs the same CLI as the ``hyperscalees`` script."""
from .cli.main import main

raise SystemExit(main())

"""One module per `mnemo-mpc` sub-command; each exposes `register(subparsers)` and sets `func` on its parser."""

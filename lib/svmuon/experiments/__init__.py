"""Small training tasks the chapters run or read: ``python -m svmuon.experiments NAME [options]``."""

_NOT_COMMANDS = ("runs", "fixed_entropy_model")  # library modules, not experiments (svmuon._cli.available skips them)

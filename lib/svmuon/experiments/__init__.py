"""Small training tasks the chapters run or read: ``python -m svmuon.experiments NAME [options]``."""

"""The one error every command raises when its arguments cannot work: printed as a usage error, exit status 2.

It sits at the bottom of the package, so the commands' rooms (grading/, course/ ...) and the command line that
dispatches to them (cli.py) both import it without importing each other."""


class UsageError(Exception):
    """A command's arguments cannot work (the message says why): printed as a usage error, exit status 2."""

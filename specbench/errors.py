"""One exception type for mistakes a user can fix; the CLI prints it as one line and exits 2."""


class SpecbenchError(Exception):
    """An error caused by user input (a bad file, flag or value), reported without a traceback."""

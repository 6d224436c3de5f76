"""Errors about the user's input. The CLI prints them without a traceback and exits 2."""


class InputError(ValueError):
    """Bad input a user can fix. The message names the input and the problem."""

    def __init__(self, what: str, problem: str):
        self.what = str(what)
        self.problem = problem
        super().__init__(f"{what}: {problem}")

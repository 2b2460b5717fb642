"""The rich console the subcommands of ``nicoll`` print to."""

__all__ = ["rich_console"]


def rich_console():
    from rich.console import Console
    console = Console()
    if not console.is_terminal:
        # Logs and pipes: wide enough for the tables instead of the 80 columns rich assumes.
        console = Console(width=160)
    return console

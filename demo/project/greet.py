"""A tiny program for the forj demo: it greets people."""


def greet(name: str) -> str:
    """Return a friendly greeting for NAME."""
    return "Hello," + name


if __name__ == "__main__":
    print(greet("world"))

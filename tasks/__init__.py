"""Generated tasks behind one interface, their data, and the one training loop."""

from tasks.base import Example, Task

__all__ = ["Example", "Task"]

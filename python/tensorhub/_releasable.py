"""What every handle shares: release() once (later calls do nothing), and
use as a context manager that releases on exit."""


class Releasable:
    def _release(self) -> None:
        """Lets go of what the handle holds; called once."""
        raise NotImplementedError

    def release(self) -> None:
        """Lets go of what the handle holds, once: later calls, and leaving
        a ``with`` block after one, do nothing. What it waits for and raises
        is each handle's (its class says)."""
        if not getattr(self, "_released", False):
            self._released = True
            self._release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

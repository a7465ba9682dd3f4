"""What every handle shares: release() once (later calls do nothing), and
use as a context manager that releases on exit."""


class Releasable:
    def _release(self) -> None:
        """Lets go of what the handle holds; called once."""
        raise NotImplementedError

    def release(self) -> None:
        if not getattr(self, "_released", False):
            self._released = True
            self._release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

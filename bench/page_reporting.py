"""Free page reporting of a virtual machine, held off while a benchmark runs.

A guest with virtio-balloon free page reporting hands each free block of
`page_reporting_order` back to its host about 2 s after the block is freed;
the next touch of such a page faults in the host as well, and the guest sees
that time in whatever instruction touched the page. A benchmark that moves
gigabytes through fresh memory then measures the host's page faults, in
amounts the host decides, and the host's work also delays the guest's timer
wake-ups (on the 2-CPU test machines, idle CPUs woke 10-20 ms late while it
ran). Bare-metal machines, where the daemon runs in production, have no
reporting. The benchmarks hold it off for their run and say so.
"""
import sys

PAGE_REPORTING_ORDER = "/sys/module/page_reporting/parameters/page_reporting_order"
# Above the buddy allocator's largest order (10), so no free block qualifies.
PAGE_REPORTING_NONE = 11


class PageReportingHold:
    """Holds a virtual machine's free page reporting off until restore().

    `state` says what it did, for the benchmark's report. Without reporting
    (bare metal, or `keep`) this does nothing; when /sys is read-only it
    keeps reporting as it is and says why."""

    def __init__(self, keep):
        self.saved = None
        try:
            with open(PAGE_REPORTING_ORDER) as f:
                self.order = int(f.read())
        except (OSError, ValueError):
            self.order = None
        if self.order is None:
            self.state = "absent"
        elif keep or self.order >= PAGE_REPORTING_NONE:
            self.state = f"kept (order {self.order})"
        else:
            try:
                self._write(PAGE_REPORTING_NONE)
            except OSError as e:  # a container's read-only /sys
                self.state = f"kept (order {self.order}; cannot hold it off: {e.strerror})"
            else:
                self.saved = self.order
                self.state = f"held off (order {self.order} restored after the run)"

    def restore(self):
        if self.saved is not None:
            try:
                self._write(self.saved)
            except OSError as e:
                print(f"{sys.argv[0]}: cannot restore {PAGE_REPORTING_ORDER} to {self.saved}: {e.strerror}",
                      file=sys.stderr)
            self.saved = None

    @staticmethod
    def _write(order):
        with open(PAGE_REPORTING_ORDER, "w") as f:
            f.write(str(order))

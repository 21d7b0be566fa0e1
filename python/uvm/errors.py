"""The one exception of the package: a uvm_status_t that is not UVM_OK."""
import enum

from . import _capi


class Status(enum.IntEnum):
    """uvm_status_t (include/uvm/uvm.h), value for value."""
    OK = 0
    INVALID_ARGUMENT = 1
    INVALID_HANDLE = 2
    INVALID_GPU = 3
    PAGE_SIZE_NOT_SUPPORTED = 4
    MISALIGNED = 5
    OUT_OF_RANGE = 6
    OUT_OF_MEMORY = 7
    NO_HOST_MEMORY = 8
    NOT_SUPPORTED = 9
    NOT_MAPPED = 10
    ALREADY_MAPPED = 11
    ADDRESS_IN_USE = 12
    NO_PEER_ACCESS = 13
    NO_DEVICE = 14
    BACKEND = 15
    LEAKED_OBJECTS = 16
    BUSY = 17
    NOT_FOUND = 18
    BUFFER_TOO_SMALL = 19
    FORKED = 20
    ASLEEP = 21
    HOST_LIMIT = 22


class UvmError(Exception):
    """A C call that did not return UVM_OK.

    .status  the uvm_status_t value (an int; compare with uvm.Status.*)
    .name    its name without the prefix ("OUT_OF_MEMORY")
    .text    uvm_status_string(status), the library's own words
    .call    the C function that failed ("uvm_mem_alloc")
    .detail  more, where the binding has it (for OUT_OF_MEMORY from an
             allocation: the calling thread's OOM report)
    """

    def __init__(self, call, status, detail=""):
        self.status = int(status)
        try:
            self.name = Status(self.status).name
        except ValueError:
            self.name = f"UNKNOWN({self.status})"
        try:
            self.text = _capi.lib().uvm_status_string(self.status).decode()
        except OSError:  # no library: keep the name alone
            self.text = self.name.lower().replace("_", " ")
        self.call = call
        self.detail = detail
        message = f"{call}: {self.text} (UVM_ERR_{self.name})" if self.status else f"{call}: {self.text}"
        super().__init__(message + (f"\n{detail}" if detail else ""))


def check(call, status, detail=""):
    """Raise UvmError unless status is UVM_OK."""
    if status != Status.OK:
        raise UvmError(call, status, detail() if callable(detail) else detail)

"""The one exception of the package: a uvm_status_t that is not UVM_OK."""
from __future__ import annotations

import enum
from typing import Callable, NoReturn, Optional, Union

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

    .status   the uvm_status_t value (a Status, an IntEnum: == its int)
    .name     its name without the prefix ("OUT_OF_MEMORY")
    .text     uvm_status_string(status), the status's own words
    .message  why the call failed: uvm_last_error_message as the call left
              it, naming the argument, limit or environment variable at fault
              ("sim.gpu_count 100 is over the limit of 32 GPUs (UVM_MAX_GPUS)");
              .text where the library said nothing more
    .call     the C function that failed ("uvm_mem_alloc")
    .detail   more, where the binding has it (for OUT_OF_MEMORY from an
              allocation: the calling thread's OOM report)
    """

    def __init__(self, call: str, status: int, detail: str = "", message: Optional[str] = None) -> None:
        try:
            self.status: int = Status(int(status))
            self.name = Status(self.status).name
        except ValueError:
            self.status = int(status)
            self.name = f"UNKNOWN({self.status})"
        try:
            self.text = _capi.lib().uvm_status_string(self.status).decode()
        except OSError:  # no library: keep the name alone
            self.text = self.name.lower().replace("_", " ")
        self.message = message or self.text
        self.call = call
        self.detail = detail
        words = f"{call}: {self.message} (UVM_ERR_{self.name})" if self.status else f"{call}: {self.message}"
        super().__init__(words + (f"\n{detail}" if detail else ""))


def last_error_message() -> str:
    """uvm_last_error_message: why the calling thread's last call failed."""
    return _capi.lib().uvm_last_error_message().decode(errors="replace")


def check(call: str, status: int, detail: Union[str, Callable[[], str]] = "") -> None:
    """Raise UvmError unless status is UVM_OK, with the library's message for
    the call (read first: `detail` may call into the library again)."""
    if status != Status.OK:
        fail(call, status, detail)


def fail(call: str, status: int, detail: Union[str, Callable[[], str]] = "") -> NoReturn:
    """Raise UvmError for the C call that just returned `status` on this thread."""
    message = last_error_message()
    raise UvmError(call, status, detail() if callable(detail) else detail, message)

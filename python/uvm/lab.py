"""The page-size lab (include/uvm/uvm_lab.h) as uvm.lab: the bindings of
python/uvm_lab.py, which stays importable on its own (lab_plots.py and the
lab's tests use it as `uvm_lab`). Here it loads the library the package found."""
import uvm_lab

from . import _capi

if uvm_lab.LIBRARY is None:
    uvm_lab.LIBRARY = _capi.lib()._name

from uvm_lab import (  # noqa: E402,F401
    ADAPTIVE, GRAPH_WALK, GROWING_SET, MOSAIC, PAGES_2M, PAGES_4K, PAGES_64K, POINTER_CHASE, POLICY_NAMES, RANDOM,
    SEQUENTIAL, STRIDED, Access, Lab, LabError, Model, Stats, Workload)

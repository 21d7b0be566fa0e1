// The page-size lab's model against the GPU's pointer chase
// (bench/lab_pointer_chase.cu, docs/page-size-lab.md "The model against the
// GPU"): reads the chase's CSV and replays the same chase through the
// simulator, so that each measured row gets the model's figure beside it.
//
// The model counts translation only, so it is anchored per series (one
// memory, load kind and stride): each row's model figure is the series'
// anchor plus the translation time the model gives that row (ns x the SM
// clock), the anchor being the median of (measured - translation) over the
// series' five smallest element counts. Host memory is modelled on 4K pages
// whatever its host page size (see read_chase's caller in the guide). A series whose
// measured cycles rise where the model's stay flat (or the reverse) is where
// the model and the GPU disagree.
//
// Thread safety: none needed; pure functions of their arguments.
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <vector>

#include "lab/page_size_sim.h"

namespace uvm::lab {

struct ChaseRow {
    std::string memory;  // vidmem (2M pages), host_4k or host_2m_thp (the GPU maps both in 4K pages)
    std::string load;    // cg (L2 only) or ca
    uint64_t stride = 0;    // bytes
    uint64_t elements = 0;
    double cycles = 0;      // the median measured
    double model_cycles = 0;
};

// Reads the chase's CSV (memory,load,stride_kib,footprint_mib,elements,
// cycles_per_step,...) and the SM clock from its "# ..., SM clock N MHz"
// line. INVALID_ARGUMENT with "line N: why" for a malformed row or no clock.
uvm_status_t read_chase(std::istream &in, std::vector<ChaseRow> *rows, double *clock_ghz, std::string *error);

// Fills model_cycles of every row of `load` (others are dropped), replaying
// each chase (max(16384, elements) warm steps, then as many timed) through a
// simulator of `model` under the memory's page size.
uvm_status_t model_chase(const MachineModel &model, double clock_ghz, const std::string &load,
                         std::vector<ChaseRow> *rows);

}  // namespace uvm::lab

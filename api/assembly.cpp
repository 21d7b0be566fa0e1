// The manager's assembly: the object core (uvm/manager.h) with the state of
// every subsystem above it (streams, clients and budgets, pressure notices,
// the trace, the metrics servers), made here, the one place that sees them
// all, and ended by the core with the deleters they came with.
#include "api/handles.h"

#include "observe/metrics_server.h"
#include "observe/trace.h"
#include "compact/compact.h"
#include "pressure/client.h"
#include "pressure/gpu_pressure.h"
#include "pressure/pressure.h"
#include "stream/stream.h"

namespace uvm {

uvm_status_t create_manager(std::unique_ptr<backend::Backend> backend, uvm_manager_t **out) {
    if (!out || !backend)
        return UVM_ERR_INVALID_ARGUMENT;
    try {
        Manager *made = nullptr;
        const uvm_status_t status = Manager::create(std::move(backend), &made);
        if (status != UVM_OK)
            return status;
        std::unique_ptr<Manager> mgr(made);
        // Before any root chunk is taken: the GPU's held memory is watched from the first.
        for (uint32_t g = 0; g < mgr->gpu_count(); ++g)
            mgr->gpu(g).pressure = make_part<GpuPressure>(mgr->backend(), g);
        for (uint32_t g = 0; g < mgr->gpu_count(); ++g)
            mgr->gpu(g).compaction = make_part<GpuCompaction>();
        Manager::Parts parts;
        parts.streams = make_part<Streams>(*mgr, mgr->id());
        parts.clients = make_part<Clients>(mgr->id(), mgr->labels);
        parts.metrics_servers = make_part<MetricsServers>(*mgr);
        parts.pressure = make_part<PressureQueue>();
        parts.tracer = make_part<Tracer>(mgr->tracing);
        mgr->attach(std::move(parts));
        // Objects parked on a GPU's streams go back before its PMM grows: kept
        // beside new memory, they would raise what the GPU holds. So do
        // retired objects whose work is done: a stitched one's kernel view
        // maps driver allocations whose roots the PMM may give back to grow.
        for (uint32_t g = 0; g < mgr->gpu_count(); ++g)
            mgr->gpu(g).caches.set_before_growth([m = mgr.get(), g] {
                m->streams().unpark(g);
                if (m->stitching)
                    m->streams().reap(false);
            });
        *out = to_handle(mgr.release());
        return UVM_OK;
    } catch (const std::bad_alloc &) {
        return UVM_ERR_NO_HOST_MEMORY;
    }
}

}  // namespace uvm

// Which backend a manager gets.
#include <cstdlib>
#include <cstring>

#include "backend/backend.h"
#include "common/enum_value.h"
#include "common/last_error.h"
#include "sim/sim_backend.h"
#if defined(UVM_HAVE_CUDA)
#include "cuda/cuda_backend.h"
#endif

namespace uvm::backend {

static uvm_status_t create_cuda(std::unique_ptr<Backend> *out) {
#if defined(UVM_HAVE_CUDA)
    return cuda::create_cuda_backend(out);
#else
    (void)out;
    return fail(UVM_ERR_NOT_SUPPORTED, "the CUDA backend is not built in (no cuda.h when the library was built)");
#endif
}

uvm_status_t create_backend(const uvm_manager_params_t &params, std::unique_ptr<Backend> *out) {
    uvm_backend_kind_t kind = static_cast<uvm_backend_kind_t>(enum_value(params.backend));
    if (kind == UVM_BACKEND_AUTO) {
        const char *forced = std::getenv("UVM_BACKEND");
        if (forced && std::strcmp(forced, "sim") == 0)
            kind = UVM_BACKEND_SIM;
        else if (forced && std::strcmp(forced, "cuda") == 0)
            kind = UVM_BACKEND_CUDA;
        else if (forced && *forced && std::strcmp(forced, "auto") != 0)
            return fail(UVM_ERR_INVALID_ARGUMENT, "UVM_BACKEND=%.200s: no such backend; sim or cuda", forced);
        if (kind == UVM_BACKEND_CUDA) {
            // The environment chose it, not the caller (who asked for auto): say so.
            const uvm_status_t status = create_cuda(out);
            return status == UVM_OK ? status : fail_within(status, "UVM_BACKEND=cuda");
        }
    }
    switch (kind) {
        case UVM_BACKEND_SIM:
            return sim::create_sim_backend(params.sim, out);
        case UVM_BACKEND_CUDA:
            return create_cuda(out);
        case UVM_BACKEND_AUTO:
            // A driver with a GPU gets CUDA; anything else falls back to sim.
            if (create_cuda(out) == UVM_OK)
                return UVM_OK;
            return sim::create_sim_backend(params.sim, out);
    }
    return UVM_ERR_INVALID_ARGUMENT;
}

}  // namespace uvm::backend

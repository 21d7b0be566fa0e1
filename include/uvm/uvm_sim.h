/*
 * uvm_sim.h - test hooks of the sim backend.
 *
 * Calls that exist so that tests can drive simulated GPUs deterministically;
 * on other backends they give UVM_ERR_NOT_SUPPORTED. Included by uvm.h,
 * whose conventions hold here.
 */
#ifndef UVM_UVM_SIM_H
#define UVM_UVM_SIM_H

#ifndef UVM_UVM_H
#include <uvm/uvm.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Sim only (NOT_SUPPORTED on CUDA): queue work that stays in flight until
 * released, as a kernel spinning on a flag would, so that tests can hold a
 * stream's work deterministically. Release lets the oldest held work of the
 * stream finish (INVALID_ARGUMENT if none is held); the work queued behind
 * it runs then. Thread-safe. */
UVM_API uvm_status_t uvm_sim_stream_hold(uvm_manager_t *mgr, uvm_stream_t *stream);
UVM_API uvm_status_t uvm_sim_stream_release(uvm_manager_t *mgr, uvm_stream_t *stream);

#ifdef __cplusplus
}
#endif

#endif /* UVM_UVM_SIM_H */

// The page-size lab's cost model (docs/page-size-lab.md, "Calibration"): what
// pinning, mapping and migrating pages cost, fitted to the driver-call timings
// in the calibration file (lab/calibration.csv, written by
// tools/lab_calibrate.sh on a GPU), and checked against the composite costs
// the same file holds, each size predicted by a fit that never saw it.
//
// Every term is a physical cost, fitted by non-negative least squares on
// relative error (each size counts alike, small or big), so that no term and
// no prediction can be negative:
//   pin(n pages)       = call + n x per-page + max(0, n - knee)^2 x bend
//                        (cuMemHostRegister; the bend: each page past the knee
//                        costs more than the one before, as the host's
//                        structures for the pinned range outgrow its caches)
//   set_access(n)      = the same form, by 2 MiB handles in the range
//   growth(n x 2 MiB)  = n x (create + map) + set_access(n) + interleave(n)
//                        (interleave = call + n x per-handle: what the calls
//                        cost more when made back to back than one at a time,
//                        fitted to the growth rows themselves)
//   map_object(2 MiB)  = map + set_access(1 handle)
//   migrate(bytes)     = latency + bytes / bandwidth  (one pinned copy)
// The knee is searched over the measured sizes (and "none"); the bend is zero
// where the data does not curve upwards.
//
// Thread safety: none needed; everything here is a value or a pure function.
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <vector>

#include "uvm/uvm.h"

namespace uvm::lab {

// One row of the calibration file.
struct Measurement {
    std::string device;
    std::string date;
    std::string quantity;
    uint64_t bytes = 0;
    uint64_t page_bytes = 0;
    uint32_t samples = 0;
    double median_us = 0, min_us = 0, max_us = 0;
};

// Reads the calibration file's rows ('#' lines and the header are skipped).
// INVALID_ARGUMENT with "line N: why" in `error` for a malformed row (wrong
// field count, a number that does not parse, a negative or zero size).
uvm_status_t read_calibration(std::istream &in, std::vector<Measurement> *out, std::string *error);

// cost(units) = call + units x per_unit + max(0, units - knee)^2 x bend. All
// four are non-negative, so the cost is never negative and never falls as
// units grow. bend = 0 is a straight line.
struct CostCurve {
    double call_us = 0;
    double per_unit_us = 0;
    double bend_us = 0;      // per unit squared past the knee
    double knee_units = 0;
    double at(double units) const {
        const double past = units > knee_units ? units - knee_units : 0;
        return call_us + units * per_unit_us + past * past * bend_us;
    }
    // The marginal cost of one more unit at `units` (the slope): per_unit
    // below the knee, rising past it.
    double marginal_at(double units) const {
        return per_unit_us + (units > knee_units ? 2 * (units - knee_units) * bend_us : 0);
    }
};

// Non-negative least squares, min |A x - b|^2 subject to x >= 0, for a few
// columns (at most 6): every subset of columns is solved unconstrained and the
// best solution with no negative term wins, which is the exact optimum of
// this convex problem. Columns are scaled before solving, so that units and
// units^2 of a 1 GiB range do not swamp each other. Empty A: an empty x.
std::vector<double> nnls(const std::vector<std::vector<double>> &a, const std::vector<double> &b);

// The straight line call + per_unit x u through (units, measured us) points,
// by non-negative least squares on relative error: minimises
// sum ((call + per_unit x u_i) / y_i - 1)^2 with call, per_unit >= 0. One
// point: all per unit. No point, or a point that is not positive: the zero
// cost.
CostCurve fit_relative(const std::vector<std::pair<double, double>> &points);

// The curve through the points: for the knee at no unit (a straight line when
// the bend comes out zero) and at each measured size but the largest, the
// non-negative fit of call, per-unit and bend; the knee whose fit has the
// smallest relative error wins (the smaller knee where they tie). Fewer than
// three points: fit_relative (a bend needs three to be seen).
CostCurve fit_curve(const std::vector<std::pair<double, double>> &points);

struct CostModel {
    CostCurve pin_4k;        // cuMemHostRegister, by 4 KiB pages
    CostCurve pin_2m;        // by 2 MiB pages (THP)
    double create_us = 0;    // cuMemCreate, one 2 MiB handle
    double map_us = 0;       // cuMemMap, one 2 MiB handle
    CostCurve set_access;    // one cuMemSetAccess, by 2 MiB handles in its range
    CostCurve interleave;    // growth's cost beyond its calls timed one kind at a time, by handles (a line)
    CostCurve copy_h2d;      // one pinned copy, by bytes (a line: latency + bytes / bandwidth)
    CostCurve copy_d2h;

    // Pinning `bytes` on pages of `page_bytes`: 4 KiB and 2 MiB as fitted;
    // 64 KiB (no x86 host page is that size) as 16 pages of 4 KiB.
    double pin_us(uint64_t bytes, uint64_t page_bytes) const;
    double growth_us(uint64_t bytes) const;  // a pool grown by bytes / 2 MiB handles
    double map_object_us() const;            // one 2 MiB object at a new address
    double migrate_in_us(uint64_t bytes) const { return copy_h2d.at(double(bytes)); }
    double migrate_out_us(uint64_t bytes) const { return copy_d2h.at(double(bytes)); }
};

// Fits the model to the rows of the device named `device`, or else of the
// one device whose name contains it (case-insensitive). Rows of size
// `hold_out_bytes` are left out of every fit (0: none), for validation on
// sizes the model has not seen; the handle calls, measured at 2 MiB only,
// stay. Growth's interleave term is fitted to the growth rows left, after the
// calls' fits; with no growth row left it is zero. NOT_FOUND
// (with why in `error`) where no device matches, more than one does, or a
// quantity the model needs is missing.
uvm_status_t fit_costs(const std::vector<Measurement> &rows, const std::string &device, uint64_t hold_out_bytes,
                       CostModel *out, std::string *error);

// The model against the measurements of one device, leave-one-out: pinning at
// every size and page, one cuMemSetAccess at every range, growth at every
// size, mapping an object, and a page's migration at every size. `model_us`
// comes from the fit on every row; `held_out_us` from the fit that saw no row
// of this row's size (map_object is never fitted: it is predicted from the
// calls it makes, and held out with the 2 MiB rows).
struct Validation {
    std::string quantity;
    uint64_t bytes = 0;
    uint64_t page_bytes = 0;
    double measured_us = 0;
    double model_us = 0;
    double held_out_us = 0;
    double error() const { return model_us / measured_us - 1; }
    double held_out_error() const { return held_out_us / measured_us - 1; }
};
// `fitted` (may be null): the fit on every row, the one `model_us` comes from.
uvm_status_t validate_costs(const std::vector<Measurement> &rows, const std::string &device,
                            std::vector<Validation> *out, std::string *error, CostModel *fitted = nullptr);

// Reads the calibration file at `path`; an empty path: the source tree's
// lab/calibration.csv, else the installed one. NOT_FOUND where it cannot be
// opened; read_calibration's errors, prefixed with the path.
uvm_status_t load_calibration(const std::string &path, std::vector<Measurement> *out, std::string *error);

// load_calibration, then fit_costs of `device` on every row: the costs the
// lab charges (uvm_lab_set_costs, uvm-lab --costs).
uvm_status_t load_costs(const std::string &path, const std::string &device, CostModel *out, std::string *error);

// The names of the devices in `rows`, in the order they first appear.
std::vector<std::string> calibration_devices(const std::vector<Measurement> &rows);

}  // namespace uvm::lab

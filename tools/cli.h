// The command-line convention of uvm's programs (uvm-tool and its
// subcommands, uvm-lab, out_of_core), over CLI11 so that each program
// declares its options once and gets the same behaviour:
//   --help, -h     what it does and every option, on stdout; exit 0
//   --version      "<program> <the project's version>"; exit 0
//   anything refused (an unknown flag, a value that does not parse or is out
//   of range): "<program>: <why>", the usage line and where to find the
//   options, on stderr; exit 2, as getopt-based tools do.
// The program's own failures (a file that cannot be read, no endpoint) exit 1.
#pragma once

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#ifndef UVM_VERSION_STRING
#error "UVM_VERSION_STRING (the project's version) comes from CMakeLists.txt"
#endif

namespace uvm::cli {

constexpr int kRefused = 2;

// The convention's flags and wording on `app` (call before adding subcommands:
// they inherit the formatter).
inline void set_conventions(CLI::App &app) {
    app.set_version_flag("--version", app.get_name() + " " + UVM_VERSION_STRING, "Print the version and exit");
    app.get_formatter()->label("Usage", "usage");
    app.get_formatter()->column_width(34);
}

// A whole number, digits only: CLI11 would read "-1" into an unsigned
// option as its largest value.
inline CLI::Validator whole_number(uint64_t lo = 0, uint64_t hi = UINT64_MAX) {
    return CLI::Validator(
        [lo, hi](std::string &v) -> std::string {
            errno = 0;
            const unsigned long long n = std::strtoull(v.c_str(), nullptr, 10);
            if (v.empty() || v.size() > 20 || v.find_first_not_of("0123456789") != std::string::npos || errno ||
                n < lo || n > hi)
                return "'" + v + "' is not a whole number " +
                       (hi == UINT64_MAX ? "(" + std::to_string(lo) + " or more)"
                                         : "from " + std::to_string(lo) + " to " + std::to_string(hi));
            return std::string();
        },
        "");
}

// A number above 0 (seconds, a rate).
inline CLI::Validator above_zero() {
    return CLI::Validator(
        [](std::string &v) -> std::string {
            char *end = nullptr;
            const double x = std::strtod(v.c_str(), &end);
            if (v.empty() || *end || !(x > 0) || x > 1e9)
                return "'" + v + "' is not a number above 0";
            return std::string();
        },
        "");
}

// The (sub)command a refusal is about, the deepest one selected so far, and
// its name as typed: "uvm-tool top".
inline const CLI::App *refused_in(const CLI::App &app, std::string *name) {
    const CLI::App *at = &app;
    *name = app.get_name();
    for (;;) {
        const std::vector<CLI::App *> selected = at->get_subcommands();
        if (selected.empty())
            return at;
        at = selected.front();
        *name += " " + at->get_name();
    }
}

// A refusal: says why with the usage of the (sub)command refused, returns kRefused.
inline int refuse(const CLI::App &app, const std::string &why) {
    std::string name;
    const CLI::App *at = refused_in(app, &name);
    CLI::Formatter usage;
    usage.label("Usage", "usage");
    std::fprintf(stderr, "%s: %s\n%srun '%s --help' for every option\n", name.c_str(), why.c_str(),
                 usage.make_usage(at, name).c_str(), name.c_str());
    return kRefused;
}

// Parses argv; -1 to go on, else the exit status to return from main (0
// after --help or --version, kRefused after a refusal, having said why).
inline int parse(CLI::App &app, int argc, char **argv) {
    try {
        app.parse(argc, argv);
        return -1;
    } catch (const CLI::CallForHelp &) {
        std::fputs(app.help().c_str(), stdout);
        return 0;
    } catch (const CLI::CallForAllHelp &) {
        std::fputs(app.help("", CLI::AppFormatMode::All).c_str(), stdout);
        return 0;
    } catch (const CLI::CallForVersion &e) {
        std::printf("%s\n", e.what());
        return 0;
    } catch (const CLI::ExtrasError &) {
        // CLI11 lists them last first; in the order given they read as typed.
        const std::vector<std::string> extra = app.remaining(true);
        std::string given;
        for (const std::string &a : extra)
            given += (given.empty() ? "" : " ") + a;
        return refuse(app, std::string("The following argument") + (extra.size() > 1 ? "s were" : " was") +
                               " not expected: " + given);
    } catch (const CLI::ParseError &e) {
        return refuse(app, e.what());
    }
}

}  // namespace uvm::cli

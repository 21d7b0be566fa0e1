// uvm-lab's options: the command's words into a LabOptions (lab_run.h), for
// the command line and for the browser lab, whose query string becomes the
// same words (lab_server.h).
//
// Thread safety: none needed; everything here works on the caller's values.
#pragma once

#include <string>
#include <vector>

#include "lab/lab_run.h"

namespace CLI {
class App;
}

namespace uvm::lab {

// The command's options, declared on `app` (CLI11, the programs' convention:
// tools/cli.h): `out` is set to the defaults, and each option sets its part
// of it when parsed; a value it does not take is refused with a sentence
// that names it ("unknown workload 'x' (...)").
void add_lab_options(CLI::App *app, LabOptions *out);

// The command's words (without the program's name) into `out`, through
// add_lab_options; false with why on a word or value it does not take. The
// browser lab's query string comes here as words (lab_server.h).
bool parse_options(const std::vector<std::string> &args, LabOptions *out, std::string *why);

// uvm-lab's command line, with the programs' convention (tools/cli.h): -1
// with `out` set to go on, else the exit status (0 after --help or
// --version; 2 after a refusal, said on stderr with the usage).
int parse_command_line(int argc, char **argv, LabOptions *out);

}  // namespace uvm::lab

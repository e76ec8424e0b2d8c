// commands.h — the subcommands of the `posgrad` tool. Each add_* registers its options (generated
// from its option table, cli/options.h) and a callback; a subcommand's set-up and callback read only
// its own arguments. main.cpp runs the parser and turns exceptions into a message on stderr and
// the exit status documented in exit_status_help().
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/options.h"

namespace posgrad::cli {

void add_train(CLI::App& app);
void add_eval(CLI::App& app);
void add_sample(CLI::App& app);
void add_gradcheck(CLI::App& app);
void add_info(CLI::App& app);
void add_compare(CLI::App& app);
void add_report(CLI::App& app);     // re-renders a finished comparison
void add_fill_mask(CLI::App& app);  // an encoder of the comparison's encoder track fills masks

// Refuses (CommandLineError, exit 2) a subcommand that runs in one process (eval, sample, fill-mask,
// report) when a launcher started several: each would do the same work and write the same files.
void require_single_process(const std::string& subcommand);

// Under a launcher every process must run the same configuration (an MPMD command line such as
// `mpirun -np 1 posgrad train --lr 1e-3 : -np 1 posgrad train --lr 2e-3` could give each its own): the
// ranks compare `config` (the resolved configuration as JSON) with rank 0's, leaving out the keys of
// `per_process` (settings each process may have its own: threads, jobs), and all refuse alike, naming
// the first option that differs, before any of them runs or enters another collective
// (CommandLineError: exit 2 on every rank, said once). A collective: every rank must call it.
void require_one_configuration(nlohmann::json config, const std::vector<std::string>& per_process);

// The exit-status contract, as printed at the end of every --help.
std::string exit_status_help();

}  // namespace posgrad::cli
